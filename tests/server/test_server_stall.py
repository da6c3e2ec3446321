"""A wedged scheduler is noticed: SIGSTOP its process and /health answers 503 once its loop
has been silent for --scheduler-stall-timeout-s, the request waiting on it fails with 503, a
new one is refused as not started; SIGCONT and it serves again, with the pool whole."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx

from radixrt.serve.web.middleware import NOT_STARTED_HEADER

from .server_proc import ServerProcess, start_server

STALL_S = 2.0
BODY = {"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}


def _wait_health(server: ServerProcess, status: int, timeout_s: float) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        r = server.get("/health")
        if r.status_code == status:
            return r
        assert time.monotonic() < deadline, f"/health still {r.status_code}: {r.text}"
        time.sleep(0.1)


def test_a_stopped_scheduler_is_noticed_and_recovers(tiny_llama_path: Path, tmp_path: Path) -> None:
    server = start_server(tiny_llama_path, tmp_path, "--scheduler-stall-timeout-s", str(STALL_S))
    try:
        server.assert_serving()
        pid = server.scheduler_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            waiting: list[httpx.Response] = []
            thread = threading.Thread(
                target=lambda: waiting.append(server.post("/generate", json=BODY))
            )
            thread.start()  # sent while the heartbeat is still fresh: it waits on the scheduler
            t0 = time.monotonic()
            r = _wait_health(server, 503, STALL_S + 10)
            assert time.monotonic() - t0 >= STALL_S - 0.5
            assert "--scheduler-stall-timeout-s" in r.json()["error"]["message"]
            thread.join(30)
            assert waiting and waiting[0].status_code == 503, waiting
            assert "not made progress" in waiting[0].json()["error"]["message"]
            refused = server.post("/generate", json=BODY)
            assert refused.status_code == 503 and refused.headers.get(NOT_STARTED_HEADER) == "1"
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait_health(server, 200, 10)
        server.assert_serving()  # served again; the failed request's abort freed its slots
        assert "runs again after a stall" in server.log()
    finally:
        server.stop()
