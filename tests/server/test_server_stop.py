"""A clean stop keeps the disk tier's blocks: the server's own shutdown stops its scheduler
with a StopMsg, SIGTERM to the scheduler (its parent's death sends one) stops it cleanly too,
and the next start on the folder serves what was announced."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

from .server_proc import ServerProcess, start_server

SP = {"max_new_tokens": 2, "temperature": 0}  # (with 1, nothing is written through)
PROMPT = [random.Random(5).randrange(100, 40000) for _ in range(100)]


def _disk_server(model: Path, tmp: Path, kv: Path) -> ServerProcess:
    return start_server(model, tmp, "--max-total-tokens", "512", "--cache-dir", str(kv),
                        "--tier-block-size", "16", "--write-through-min-tokens", "16")  # fmt: skip


def _disk_tokens(server: ServerProcess) -> int:
    r = server.post("/generate", json={"input_ids": PROMPT, "sampling_params": SP})
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]["cached_tokens_by_tier"].get("disk", 0)


def test_sigterm_to_the_scheduler_stops_it_cleanly(tiny_llama_path: Path, tmp_path: Path) -> None:
    kv = tmp_path / "kv"
    server = _disk_server(tiny_llama_path, tmp_path, kv)
    try:
        assert _disk_tokens(server) == 0  # written through to the disk tier
        os.kill(server.scheduler_pid(), signal.SIGTERM)
        server.proc.wait(60)  # the HTTP process follows its scheduler out
        log = server.log()
        assert "SIGTERM: scheduler stopping" in log, log
        assert "the scheduler process exited with status 0" in log, log
    finally:
        server.stop()
    (tmp_path / "again").mkdir()
    again = _disk_server(tiny_llama_path, tmp_path / "again", kv)
    try:
        assert _disk_tokens(again) == 96  # the 6 whole blocks before the last token
        again.wait_idle_and_whole()
    finally:
        again.stop()


def test_the_servers_shutdown_stops_its_scheduler_cleanly(tiny_llama_path: Path,
                                                          tmp_path: Path) -> None:  # fmt: skip
    server = _disk_server(tiny_llama_path, tmp_path, tmp_path / "kv")
    try:
        _disk_tokens(server)
        server.wait_idle_and_whole()
        os.kill(server.proc.pid, signal.SIGTERM)  # the HTTP process alone, as an orchestrator does
        assert server.proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM
        assert "stop requested: scheduler stopping" in server.log()
    finally:
        server.stop()
