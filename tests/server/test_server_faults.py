"""API key, the queue limit, SIGTERM draining, and a scheduler that dies under the server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from .server_proc import ServerProcess, free_port, start_server

KEY = "s3cret-key"
DRAIN_S = 8


@pytest.fixture(scope="module")
def guarded(smollm2_path, tmp_path_factory):
    """Two requests at a time, one more may wait; every endpoint but /health needs the key;
    SIGTERM gives running requests DRAIN_S seconds."""
    server = start_server(
        smollm2_path,
        tmp_path_factory.mktemp("guarded"),
        "--api-key",
        KEY,
        "--max-running-requests",
        "2",
        "--max-queued-requests",
        "1",
        "--drain-timeout-s",
        str(DRAIN_S),
    )
    server.headers = {"Authorization": f"Bearer {KEY}"}
    try:
        yield server
    finally:
        server.stop()


def wait_running(server: ServerProcess, num: int = 1) -> None:
    deadline = time.monotonic() + 60
    while server.get("/get_server_info").json()["num_running_reqs"] < num:
        assert time.monotonic() < deadline, "request never started"
        time.sleep(0.05)


def test_api_key_is_enforced(guarded) -> None:
    url = guarded.url
    assert httpx.get(url + "/health").status_code == 200
    assert httpx.get(url + "/get_model_info").status_code == 401
    bad = {"Authorization": "Bearer wrong"}
    assert httpx.get(url + "/get_server_info", headers=bad).status_code == 401
    assert httpx.post(url + "/generate", json={"text": "hi"}).status_code == 401
    assert guarded.get("/get_model_info").status_code == 200
    assert guarded.get("/metrics").status_code == 404  # not enabled, but past the key check
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    out = client.completions.create(model="m", prompt="Hello", max_tokens=2)
    assert out.usage.completion_tokens == 2
    wrong = openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_queue_limit_refuses_with_503(guarded) -> None:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=guarded.url, headers=guarded.headers, timeout=300
        ) as c:
            return await asyncio.gather(
                *[
                    c.post(
                        "/generate",
                        json={
                            "text": f"Story {i}:",
                            "sampling_params": {"max_new_tokens": 32, "ignore_eos": True},
                        },
                    )
                    for i in range(8)
                ]
            )

    responses = asyncio.run(run())
    codes = [r.status_code for r in responses]
    assert set(codes) == {200, 503}, codes
    refused = next(r for r in responses if r.status_code == 503)
    assert "max_queued_requests" in refused.json()["error"]["message"]
    guarded.wait_idle_and_whole()


def test_sigterm_drains_running_requests_then_exits(guarded) -> None:
    """A short request finishes during the drain; a long one is aborted at the deadline (and
    still answered); then the server and its scheduler exit."""
    sched_pid = guarded.scheduler_pid()
    results: list[httpx.Response] = []
    long = {
        "text": "Once upon a time",
        "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True},
    }
    thread = threading.Thread(target=lambda: results.append(guarded.post("/generate", json=long)))
    thread.start()
    wait_running(guarded)
    short = {
        "text": "In a land far away",
        "stream": True,
        "sampling_params": {"max_new_tokens": 16, "ignore_eos": True},
    }
    with httpx.stream(
        "POST", guarded.url + "/generate", json=short, headers=guarded.headers, timeout=120
    ) as stream:
        events = (line[6:] for line in stream.iter_lines() if line.startswith("data: "))
        next(events)  # the short request is running
        start = time.monotonic()
        os.kill(guarded.proc.pid, signal.SIGTERM)
        rest = list(events)
    assert rest[-1] == "[DONE]"
    meta = json.loads(rest[-2])["meta_info"]
    assert meta["completion_tokens"] == 16 and meta["finish_reason"]["type"] == "length"
    thread.join(120)
    meta = results[0].json()["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["completion_tokens"] < 3000
    assert guarded.proc.wait(60) in (0, -signal.SIGTERM)
    assert time.monotonic() - start < DRAIN_S + 30
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{sched_pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{sched_pid}") or _is_zombie(sched_pid)


def test_killing_the_scheduler_fails_requests_and_exits(smollm2_path, tmp_path) -> None:
    server = start_server(smollm2_path, tmp_path)
    try:
        long = {"sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}}
        result: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: result.append(
                server.post("/generate", json={"text": "Write an essay.", **long})
            )
        )
        thread.start()
        with httpx.stream(
            "POST",
            server.url + "/generate",
            timeout=120,
            json={"text": "Write a poem.", "stream": True, **long},
        ) as stream:
            lines = stream.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            wait_running(server, 2)
            os.kill(server.scheduler_pid(), signal.SIGKILL)
            rest = [line[6:] for line in lines if line.startswith("data: ")]
        thread.join(60)
        assert result[0].status_code == 503, result[0].text
        assert "scheduler" in result[0].json()["error"]["message"]
        assert rest[-1] == "[DONE]" and json.loads(rest[-2])["error"]["code"] == 503
        assert server.proc.wait(60) != 0
    finally:
        server.stop()


def test_a_bad_model_path_exits_with_status_1(tmp_path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "radixrt.launch_server",
        "--model-path",
        str(tmp_path / "missing"),
        "--port",
        str(free_port()),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "model path not found" in done.stderr


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
