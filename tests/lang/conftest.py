"""Fixtures for the language tests: one SmolLM2 server per session, one Engine per module,
and `backend`, which runs a test once on each."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import radixrt as rt

START_TIMEOUT_S = 240.0
MAX_TOTAL_TOKENS = 4096


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class LangServer:
    """`python -m radixrt.launch_server` on a free port, in its own process group."""

    def __init__(self, model_path: Path, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        cmd = [
            sys.executable,
            "-m",
            "radixrt.launch_server",
            "--model-path",
            str(model_path),
            "--port",
            self.url.rsplit(":", 1)[1],
            "--max-total-tokens",
            str(MAX_TOTAL_TOKENS),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                _get(self.url + "/health")
                return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"server not ready after {START_TIMEOUT_S} s:\n{self.log()}")

    def assert_pool_whole(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            info = _get(self.url + "/get_server_info")
            if info["num_running_reqs"] == info["num_queued_reqs"] == 0:
                break
            assert time.monotonic() < deadline, f"server still busy: {info}"
            time.sleep(0.1)
        total = info["free_tokens"] + info["evictable_tokens"] + info["protected_tokens"]
        assert total == info["max_total_tokens"], info

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        self._log.close()


def _server_available() -> bool:
    try:
        import radixrt.launch_server  # noqa: F401
        import radixrt.serve.http.http_server  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def lang_server(
    smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LangServer]:
    if not _server_available():
        pytest.skip("radixrt.launch_server is not available yet")
    server = LangServer(smollm2_path, tmp_path_factory.mktemp("lang_server") / "server.log")
    try:
        server.wait_ready()
        yield server
        server.assert_pool_whole()
        assert server.proc.poll() is None, "the server died during the tests"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def engine(smollm2_path: Path) -> Iterator[Any]:
    with rt.Engine(str(smollm2_path), max_total_tokens=MAX_TOTAL_TOKENS) as e:
        yield e
        sched = e.scheduler
        deadline = time.monotonic() + 30
        while not sched.is_idle and time.monotonic() < deadline:
            time.sleep(0.05)
        sched.kv.check_whole()


@pytest.fixture(scope="module", params=["engine", "server"])
def backend(request: pytest.FixtureRequest) -> Any:
    """The same test on the in-process Engine and on the HTTP server."""
    if request.param == "engine":
        return request.getfixturevalue("engine")
    return rt.RuntimeEndpoint(request.getfixturevalue("lang_server").url)


@pytest.fixture(scope="session")
def tokenizer(smollm2_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_path))
