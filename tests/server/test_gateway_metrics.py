"""The inference gateway's model-server protocol: queued and running requests and KV-cache
utilisation under vLLM's names, with the right values under load and when idle; /health as
a Kubernetes probe reads it."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .server_proc import start_server

SP = {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}  # 2-4 s on a tiny model


@pytest.fixture(scope="module")
def server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("gateway")
    server = start_server(tiny_llama_path, tmp, "--enable-metrics", "--max-running-requests",
                          "1", "--served-model-name", "tiny")  # fmt: skip
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _gauges(text: str) -> dict[str, float]:
    out = {}
    for name in ("num_requests_waiting", "num_requests_running", "kv_cache_usage_perc",
                 "gpu_cache_usage_perc"):  # fmt: skip
        m = re.search(rf'^vllm:{name}{{model_name="tiny"}} (\S+)$', text, re.M)
        assert m, f"vllm:{name} missing"
        out[name] = float(m.group(1))
    return out


def test_gauges_follow_the_load(server: Any) -> None:
    assert server.get("/health").json() == {"status": "ok"}
    results: list[int] = []

    def send(i: int) -> None:
        r = server.post("/generate", json={"input_ids": [100 + i] * 40, "sampling_params": SP})
        results.append(r.status_code)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    deadline, seen = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        g = _gauges(server.get("/metrics").text)
        if g["num_requests_running"] == 1 and g["num_requests_waiting"] >= 1:
            seen = g
            break
        time.sleep(0.02)
    assert seen is not None, "never saw one running and others waiting"
    assert 0 < seen["kv_cache_usage_perc"] <= 1
    assert seen["kv_cache_usage_perc"] == seen["gpu_cache_usage_perc"]
    for t in threads:
        t.join(120)
    assert results == [200] * 6
    server.wait_idle_and_whole()
    idle = _gauges(server.get("/metrics").text)
    assert idle == {"num_requests_waiting": 0, "num_requests_running": 0,
                    "kv_cache_usage_perc": 0.0, "gpu_cache_usage_perc": 0.0}  # fmt: skip
