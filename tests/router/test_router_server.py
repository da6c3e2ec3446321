"""The standalone router over two SmolLM2 servers: routing by prefix, streaming, the OpenAI
client, abort forwarding, and a killed worker taken out of rotation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.server_proc import ServerProcess, free_port, start_server

PREFIX = (
    "You are a geography tutor. Answer in one short sentence, name the country first, "
    "and never add any other detail to the answer. "
)


class RouterProcess:
    def __init__(self, urls: list[str], log_path: Path, *flags: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self._log = open(log_path, "wb")
        self.log_path = log_path
        cmd = [
            sys.executable,
            "-m",
            "radixrt.serve.router",
            "--worker-urls",
            *urls,
            "--port",
            self.url.rsplit(":", 1)[1],
            "--health-check-interval-s",
            "0.5",
            *flags,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"router not ready:\n{log_path.read_text()}")

    def info(self) -> dict:
        return httpx.get(self.url + "/get_server_info", timeout=30).json()

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def cluster(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("router")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    workers: list[ServerProcess] = []
    router = None
    try:
        for i in range(2):
            (tmp / f"w{i}").mkdir()
            workers.append(
                start_server(smollm2_path, tmp / f"w{i}", "--max-total-tokens", "2048", env=env)
            )
        router = RouterProcess([w.url for w in workers], tmp / "router.log")
        yield router, workers
        for w in workers:
            if w.proc.poll() is None:
                w.wait_idle_and_whole()
        assert router.proc.poll() is None, router.log_path.read_text()
    finally:
        if router is not None:
            router.stop()
        for w in workers:
            w.stop()


def _generate(url: str, text: str, **params) -> dict:
    r = httpx.post(
        url + "/generate",
        timeout=120,
        json={"text": text, "sampling_params": {"max_new_tokens": 3, "temperature": 0, **params}},
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_prefix_routing_streaming_and_openai(cluster) -> None:
    router, workers = cluster
    before = [w["routed_requests"] for w in router.info()["workers"]]
    outs = [_generate(router.url, PREFIX + f"Where is city number {i}?") for i in range(3)]
    after = [w["routed_requests"] for w in router.info()["workers"]]
    assert sorted(a - b for a, b in zip(after, before)) == [0, 3]  # one worker took the group
    assert all(o["meta_info"]["cached_tokens"] > 20 for o in outs[1:])
    with httpx.stream(
        "POST",
        router.url + "/generate",
        timeout=60,
        json={
            "text": "1, 2, 3,",
            "stream": True,
            "sampling_params": {"max_new_tokens": 4, "temperature": 0},
        },
    ) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert len(events) >= 3 and events[-1] == "data: [DONE]"
    assert '"finish_reason"' in events[-2]
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    full = client.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="m", messages=msgs, max_tokens=8, temperature=0, stream=True, user="alice"
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content and "Paris" in text
    assert client.completions.create(model="m", prompt="A, B,", max_tokens=2).usage
    assert len(client.models.list().data) == 1
    with pytest.raises(openai.BadRequestError):  # the worker's 400 comes back as is
        client.completions.create(model="m", prompt="x", max_tokens=-1)
    info = router.info()
    assert all(w["healthy"] and w["cache_hit_rate"] is not None for w in info["workers"])
    metrics = httpx.get(router.url + "/metrics").text
    assert "radixrt_router_routed_requests_total{worker=" in metrics
    assert "radixrt_router_worker_cache_hit_rate{worker=" in metrics


def _wait_workers_idle(workers: list[ServerProcess], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(w.get("/get_server_info").json()["num_inflight_reqs"] == 0 for w in workers):
            return
        time.sleep(0.1)
    raise AssertionError("a worker still runs the request the client left")


def test_client_disconnect_aborts_on_the_worker(cluster) -> None:
    router, workers = cluster
    long = {"max_new_tokens": 2000, "ignore_eos": True}
    with httpx.stream(
        "POST",
        router.url + "/generate",
        timeout=60,
        json={"text": "Count to a thousand:", "stream": True, "sampling_params": long},
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # leave after the first event
    _wait_workers_idle(workers)
    with pytest.raises(httpx.ReadTimeout):  # a non-streaming client that gives up
        httpx.post(
            router.url + "/generate",
            timeout=1.0,
            json={"text": "Count to a thousand:", "sampling_params": long},
        )
    _wait_workers_idle(workers)
    assert all(w["in_flight"] == 0 for w in router.info()["workers"])


def test_abort_request_by_rid_reaches_the_worker(cluster) -> None:
    router, workers = cluster
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post,
            router.url + "/generate",
            timeout=60,
            json={
                "text": "Count to a thousand:",
                "rid": "long-1",
                "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
            },
        )
        deadline = time.monotonic() + 30
        while (
            sum(httpx.get(w.url + "/get_server_info").json()["num_running_reqs"] for w in workers)
            == 0
        ):
            assert time.monotonic() < deadline and not pending.done()
            time.sleep(0.05)
        assert httpx.post(router.url + "/abort_request", json={"rid": "long-1"}).status_code == 200
        out = pending.result().json()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert out["meta_info"]["completion_tokens"] < 2000
    r = httpx.post(router.url + "/abort_request", json={"rid": "long-1"})
    assert r.status_code == 200  # the same answer whether or not the rid runs


def test_cache_handles_go_to_the_worker_that_holds_them(cluster) -> None:
    """A handle made through the router is pinned in one worker; every use, read, change and
    delete of it goes there, whichever worker the policy would pick for the prompt."""
    router, workers = cluster
    doc = PREFIX + " ".join(f"Fact {i}: river {i} is {i * 3} km long." for i in range(20))
    r = httpx.post(router.url + "/v1/caches", json={"text": doc, "ttl": 600}, timeout=120)
    assert r.status_code == 200, r.text
    handle = r.json()
    homes = [
        w for w in workers if httpx.get(w.url + f"/v1/caches/{handle['id']}").status_code == 200
    ]
    assert len(homes) == 1
    for i in range(4):  # short prompts: the policy alone would spread them
        out = httpx.post(
            router.url + "/generate", timeout=120,
            json={"text": f" River {i}?", "cache_id": handle["id"],
                  "sampling_params": {"max_new_tokens": 2, "temperature": 0}},
        )  # fmt: skip
        assert out.status_code == 200, out.text
        assert out.json()["meta_info"]["cached_tokens"] >= handle["tokens"]
    listed = httpx.get(router.url + "/v1/caches", timeout=30).json()["data"]
    assert [h["id"] for h in listed] == [handle["id"]]
    r = httpx.patch(router.url + f"/v1/caches/{handle['id']}", json={"ttl": 60}, timeout=30)
    assert r.status_code == 200 and r.json()["expire_time"] < handle["expire_time"]
    assert httpx.delete(router.url + f"/v1/caches/{handle['id']}", timeout=30).status_code == 200
    assert httpx.get(router.url + f"/v1/caches/{handle['id']}", timeout=30).status_code == 404
    assert all(w.get("/get_server_info").json()["num_pins"] == 0 for w in workers)


def test_gemini_caches_under_v1_go_to_their_worker(cluster) -> None:
    """google-genai's default api_version (/v1) through the router: a cachedContents made
    there is found again and continued by generateContent on its worker."""
    router, workers = cluster
    model = httpx.get(router.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    doc = PREFIX + " ".join(f"Fact {i}: lake {i} is {i * 7} m deep." for i in range(20))
    body = {"model": model, "contents": [{"role": "user", "parts": [{"text": doc}]}]}
    r = httpx.post(router.url + "/v1/cachedContents", json=body, timeout=120)
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    assert httpx.get(router.url + "/v1/" + name, timeout=30).json()["name"] == name
    listed = httpx.get(router.url + "/v1/cachedContents", timeout=30).json()["cachedContents"]
    assert [c["name"] for c in listed] == [name]
    ask = {"contents": [{"role": "user", "parts": [{"text": "Lake 3?"}]}], "cachedContent": name,
           "generationConfig": {"maxOutputTokens": 2, "temperature": 0}}  # fmt: skip
    for _ in range(3):
        out = httpx.post(router.url + f"/v1/models/{model}:generateContent", json=ask, timeout=120)
        assert out.status_code == 200, out.text
        assert out.json()["usageMetadata"]["cachedContentTokenCount"] > 50
    gemini = {"x-goog-api-client": "google-genai-sdk/1.0"}  # google-genai's own header
    got = httpx.get(router.url + f"/v1/models/{model}", headers=gemini, timeout=30).json()
    assert got["name"] == "models/" + model  # Gemini's shape to a Gemini client, ...
    assert httpx.get(router.url + f"/v1/models/{model}", timeout=30).json()["id"] == model
    listed = httpx.get(router.url + "/v1/models", headers=gemini, timeout=30).json()
    assert [m["name"] for m in listed["models"]] == ["models/" + model]  # ... OpenAI's else
    assert httpx.delete(router.url + "/v1/" + name, timeout=30).status_code == 200
    assert httpx.get(router.url + "/v1/" + name, timeout=30).status_code == 404
    assert all(w.get("/get_server_info").json()["num_pins"] == 0 for w in workers)


def test_killed_worker_leaves_rotation(cluster) -> None:
    router, workers = cluster
    os.killpg(workers[1].proc.pid, signal.SIGKILL)
    workers[1].proc.wait()
    for i in range(4):  # the first may reach the dead worker: it is retried on the other
        _generate(router.url, f"Say the number {i}.")
    info = router.info()
    assert [w["healthy"] for w in info["workers"]] == [True, False]
    assert httpx.get(router.url + "/health").json()["healthy_workers"] == 1
