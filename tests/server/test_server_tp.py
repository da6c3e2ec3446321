"""`launch_server --tp 3` on SmolLM2 (9 heads, 3 KV heads): same greedy text as one rank,
the radix cache still hits, a dead rank stops the server; `--tp 2` is refused at start-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from radixrt.serve.engine import Engine

from .server_proc import ServerProcess, free_port, start_server

PROMPT = "The capital of France is"
GREEDY = {"temperature": 0, "max_new_tokens": 6}


@pytest.fixture(scope="module")
def tp3_server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    server = start_server(smollm2_path, tmp_path_factory.mktemp("tp3"), "--tp", "3")
    try:
        yield server
    finally:
        server.stop()


def worker_pids(server: ServerProcess) -> list[int]:
    """The tensor-parallel ranks 1.. (children of the scheduler process, which is rank 0)."""
    sched = server.scheduler_pid()
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == sched and b"tp_worker" in cmdline:
            pids.append(int(entry))
    return pids


def test_tp3_greedy_equals_tp1_and_the_radix_cache_hits(tp3_server, smollm2_path) -> None:
    with Engine(str(smollm2_path), max_total_tokens=1024) as engine:
        want = engine.generate(PROMPT, GREEDY)["output_ids"]
    body = {"text": PROMPT, "sampling_params": GREEDY}
    first = tp3_server.post("/generate", json=body).json()
    second = tp3_server.post("/generate", json=body).json()
    assert first["output_ids"] == want
    assert second["output_ids"] == want
    assert second["meta_info"]["cached_tokens"] > 0
    tp3_server.wait_idle_and_whole()


def test_killing_one_rank_stops_the_server(tp3_server) -> None:
    workers = worker_pids(tp3_server)
    assert len(workers) == 2
    start = time.monotonic()
    os.kill(workers[0], signal.SIGKILL)
    assert tp3_server.proc.wait(30) != 0
    assert time.monotonic() - start < 15
    assert (
        "tensor-parallel rank 1" in tp3_server.log() or "tensor-parallel rank 2" in tp3_server.log()
    )
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{p}") for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(os.path.exists(f"/proc/{p}") for p in workers[1:])


def test_tp2_on_smollm2_fails_at_startup_naming_the_heads(smollm2_path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "radixrt.launch_server",
        "--model-path",
        str(smollm2_path),
        "--tp",
        "2",
        "--port",
        str(free_port()),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "num_attention_heads=9, num_key_value_heads=3" in done.stderr
    assert "valid --tp values: 1, 3" in done.stderr
