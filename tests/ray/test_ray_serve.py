"""radixrt on Ray Serve, on a local Ray cluster the test starts: two replicas of the tiny
model behind the ingress; the cache-aware router's hit rate on interleaved prefix groups is
within 5% of the optimum and above round-robin's; a replica whose server is killed mid-run is
replaced by Ray, the requests it had (running or queued) and those sent to it later are served
by the other, and nothing hangs."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray", reason="ray is in the test extra: pip install -e '.[test]'")
from ray import serve  # noqa: E402

from radixrt.ray.app import build_app  # noqa: E402

GROUPS, PER_GROUP, PREFIX, SUFFIX = 3, 8, 200, 10


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster() -> Any:
    try:
        ray.init(num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
                 log_to_driver=False)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - any failure to start is this machine's, not ours
        pytest.skip(f"a local Ray cluster cannot start on this machine: {e}")
    port = _port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def _deploy(model: Path, policy: str) -> None:
    flags = ["--model-path", str(model), "--max-total-tokens", "4096"]
    app = build_app(flags, 2, {"router_policy": policy}, health_check_period_s=1.0)
    serve.run(app, name="radixrt", route_prefix="/")


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
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


def test_cache_aware_routing_beats_round_robin(cluster: str, tiny_llama_path: Path) -> None:
    optimum = (GROUPS * PER_GROUP - GROUPS) * PREFIX / (GROUPS * PER_GROUP * (PREFIX + SUFFIX))
    _deploy(tiny_llama_path, "cache_aware")
    for bad in ({"content": b"not json"}, {"json": {"text": "hi", "stream": True}}):
        r = httpx.post(cluster + "/generate", timeout=60, **bad)
        assert r.status_code == 400 and r.json()["error"]["message"], r.text
    r = httpx.post(cluster + "/generate", json={"text": "hi", "sampling_params": {"top_p": 7}})
    assert r.status_code == 400, r.text  # the server's own checks answer through the ingress
    aware = _hit_rate(cluster)
    serve.delete("radixrt")
    _deploy(tiny_llama_path, "round_robin")  # fresh replicas: empty caches
    robin = _hit_rate(cluster)
    serve.delete("radixrt")
    assert aware >= optimum - 0.05, (aware, optimum)
    assert aware - robin >= 0.05, (aware, robin)


def _servers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "radixrt.launch_server"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split() if _is_server(int(p))]


def _is_server(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return cmd[1:3] == [b"-m", b"radixrt.launch_server"]


def test_a_killed_replica_is_replaced_and_nothing_hangs(cluster: str, tiny_llama_path) -> None:
    _deploy(tiny_llama_path, "cache_aware")
    servers = _servers()
    assert len(servers) == 2, servers
    prompts = _prompts() * 2
    with ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(_send, cluster, ids) for ids in prompts[:8]]
        time.sleep(0.5)
        os.killpg(servers[0], signal.SIGKILL)  # the server and its scheduler, mid-run
        futures += [ex.submit(_send, cluster, ids) for ids in prompts[8:]]
        answers = [f.result(timeout=300) for f in futures]
    lost = [a.text[:300] for a in answers if a.status_code != 200]
    assert not lost, lost  # those the killed server had (running or queued) went elsewhere
    deadline = time.monotonic() + 120
    while len(_servers()) < 2 or servers[0] in _servers():
        assert time.monotonic() < deadline, "Ray did not replace the replica"
        time.sleep(0.5)
    assert _send(cluster, prompts[0]).status_code == 200
    serve.delete("radixrt")


def test_cli_refuses_bad_flags_before_starting_anything() -> None:
    from radixrt.ray.__main__ import main

    with pytest.raises(SystemExit):
        main(["serve", "--replicas", "0"])
    with pytest.raises(ValueError, match="cache_threshold"):
        main(["serve", "--cache-threshold", "2", "--", "--model-path", "x"])
    with pytest.raises(SystemExit):
        main(["serve", "--router-policy"])
