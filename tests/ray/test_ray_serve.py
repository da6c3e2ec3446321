"""radixrt on Ray Serve, started the README's way (`python -m radixrt.serve.ray serve`, which starts
its own local Ray cluster, in a process of its own): two replicas of the tiny model behind the
ingress; errors pass through and streams equal plain answers; the cache-aware router's hit
rate on interleaved prefix groups is within 5% of the optimum (round-robin's, which sends
every group to both replicas, is 12 points below it: the policies themselves are
tests/routing's); a replica whose server is killed mid-run is replaced by Ray, the requests
it had (running or queued) and those sent to it later are served by the other, and nothing
hangs."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

# Ray is not imported here: the application runs in processes of its own, so that no Ray
# state (threads, handlers, libraries it loads) lives in the test process.
if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is in the test extra: pip install -e '.[test]'", allow_module_level=True)

GROUPS, PER_GROUP, PREFIX, SUFFIX = 3, 8, 200, 10
JSON = {"content-type": "application/json"}  # a body is refused without it
START_S = 240
READY = "radixrt on Ray Serve: "  # what `python -m radixrt.serve.ray serve` prints when up
PROXY_BIND_FAILED = "Failed to start proxy HTTP server"  # Ray's words when the port is taken


class RayApp:
    """`python -m radixrt.serve.ray serve` in its own process group, logging to a file."""

    def __init__(self, model: Path, policy: str, log: Path) -> None:
        self.log = log
        # The port is picked free and released, so another process (Ray's own workers among
        # them) can take it before the proxy binds it: a start that failed to bind is retried
        # on a fresh port.
        for attempt in range(3):
            if self._start(model, policy) or attempt == 2:
                return
            self.stop()

    def _start(self, model: Path, policy: str) -> bool:
        """Starts the app; False where its HTTP proxy could not bind the port picked."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "radixrt.serve.ray", "serve", "--replicas", "2", "--port",
               str(port), "--router-policy", policy, "--health-check-period-s", "1", "--",
               "--model-path", str(model), "--max-total-tokens", "4096"]  # fmt: skip
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + START_S
        while True:
            if PROXY_BIND_FAILED in self.log.read_text(errors="replace"):
                return False
            if self.proc.poll() is not None:
                pytest.fail(f"python -m radixrt.serve.ray serve exited:\n{self._tail()}")
            # The line is printed once serve.run has seen every replica healthy; the ingress
            # answers /v1/models as soon as one is, and routing then would see one replica.
            if READY in self.log.read_text(errors="replace"):
                try:
                    if httpx.get(self.url + "/v1/models", timeout=5).status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                first = self._tail()
                if "Failed to start" in first or "ray.init" in first:
                    pytest.skip(f"a local Ray cluster cannot start here:\n{first}")
                pytest.fail(f"not serving after {START_S} s:\n{first}")
            time.sleep(0.5)

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # serve.shutdown, then the cluster goes
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        deadline = time.monotonic() + 60
        while _servers() and time.monotonic() < deadline:  # replicas' servers end with them
            time.sleep(0.5)


@pytest.fixture
def app_factory(tmp_path: Path, tiny_llama_path: Path) -> Iterator:
    apps: list[RayApp] = []

    def start(policy: str) -> RayApp:
        apps.append(RayApp(tiny_llama_path, policy, tmp_path / f"ray-{len(apps)}.log"))
        return apps[-1]

    yield start
    # Latest first: stop() waits until no replica's server is left, so an app stopped earlier
    # must not wait out the running one's servers.
    for app in reversed(apps):
        app.stop()
    assert not _servers(), "a replica's server outlived the application"


def _prompts(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    groups = [[rng.randrange(100, 40000) for _ in range(PREFIX)] for _ in range(GROUPS)]
    return [groups[i % GROUPS] + [rng.randrange(100, 40000) for _ in range(SUFFIX)]
            for i in range(GROUPS * PER_GROUP)]  # fmt: skip


def _send(url: str, ids: list[int]) -> httpx.Response:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    return httpx.post(url + "/generate", json=body, timeout=180)


def _hit_rate(url: str) -> float:
    cached = prompt = 0
    for ids in _prompts():  # one at a time: the routing, not the timing, decides
        r = _send(url, ids)
        assert r.status_code == 200, r.text
        meta = r.json()["meta_info"]
        cached, prompt = cached + meta["cached_tokens"], prompt + meta["prompt_tokens"]
    return cached / prompt


def _stream_equals_plain(url: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Count: one, two,"}],
            "max_tokens": 12, "temperature": 0}  # fmt: skip
    plain = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()
    text, done = "", False
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True},
                      timeout=60) as r:  # fmt: skip
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                text += delta.get("content") or ""
    assert done and text == plain["choices"][0]["message"]["content"]


def _servers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "radixrt.launch_server"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split() if _is_server(int(p))]


def _is_server(pid: int) -> bool:
    """A radixrt server started by a Ray replica (its parent is the replica's watchdog), not
    one of the other tests' servers."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
    except OSError:
        return False
    return cmd[1:3] == [b"-m", b"radixrt.launch_server"] and b"radixrt.serve.ray.child" in parent


def test_routing_errors_streams_hit_rate_and_a_killed_replica(app_factory) -> None:
    """One application for the checks, the cache-aware hit rate and then a replica's kill (a
    Ray cluster's start is most of this test's time)."""
    optimum = (GROUPS * PER_GROUP - GROUPS) * PREFIX / (GROUPS * PER_GROUP * (PREFIX + SUFFIX))
    aware_app = app_factory("cache_aware")
    url = aware_app.url
    r = httpx.post(url + "/generate", content=b"not json", headers=JSON, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["message"], r.text
    # Web pages are refused at the ingress (radixrt/serve/web/browser.py), before any replica.
    r = httpx.post(url + "/generate", content=b'{"text": "hi"}', timeout=60,
                   headers={"content-type": "text/plain"})  # fmt: skip
    assert r.status_code == 415, r.text
    r = httpx.post(url + "/generate", json={"text": "hi"}, timeout=60,
                   headers={"origin": "http://evil.example"})  # fmt: skip
    assert r.status_code == 403, r.text
    r = httpx.get(url + "/v1/models", headers={"host": "rebind.attacker.test"}, timeout=60)
    assert r.status_code == 421, r.text
    for stream in (False, True):  # the server's own checks answer through the ingress
        body = {"text": "hi", "sampling_params": {"top_p": 7}, "stream": stream}
        r = httpx.post(url + "/generate", json=body, timeout=60)
        assert r.status_code == 400 and "top_p" in r.text, r.text
    _stream_equals_plain(url)
    aware = _hit_rate(url)
    _kill_a_replica_mid_run(url)
    # Round-robin over two replicas sends each of the three groups to both: twice the misses.
    robin = (GROUPS * PER_GROUP - 2 * GROUPS) * PREFIX / (GROUPS * PER_GROUP * (PREFIX + SUFFIX))
    assert aware >= optimum - 0.05 > robin + 0.05, (aware, optimum, robin)


def _kill_a_replica_mid_run(url: str) -> None:
    """A replica's server killed while requests run: Ray replaces it, the requests it had
    (running or queued) and those sent to it later are served by the other, nothing hangs.
    Prompts none of the replicas has cached, so the first ones are still running."""
    servers = _servers()
    assert len(servers) == 2, servers
    prompts = _prompts(seed=1) * 2
    with ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(_send, url, ids) for ids in prompts[:8]]
        time.sleep(0.5)
        os.killpg(servers[0], signal.SIGKILL)  # the server and its scheduler, mid-run
        futures += [ex.submit(_send, url, ids) for ids in prompts[8:]]
        answers = [f.result(timeout=300) for f in futures]
    lost = [a.text[:300] for a in answers if a.status_code != 200]
    assert not lost, lost  # those the killed server had (running or queued) went elsewhere
    deadline = time.monotonic() + 120
    while len(_servers()) < 2 or servers[0] in _servers():
        assert time.monotonic() < deadline, "Ray did not replace the replica"
        time.sleep(0.5)
    assert _send(url, prompts[0]).status_code == 200


def test_cli_refuses_bad_flags_before_starting_anything() -> None:
    for flags, message in ((["--replicas", "0"], "--replicas must be >= 1"),
                           (["--cache-threshold", "2"], "cache_threshold"),
                           (["--router-policy"], "expected one argument")):  # fmt: skip
        cmd = [
            sys.executable,
            "-m",
            "radixrt.serve.ray",
            "serve",
            *flags,
            "--",
            "--model-path",
            "x",
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr, r.stderr
