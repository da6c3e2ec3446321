"""A real server process on 127.0.0.1 (its own process group, logging to a file)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

START_TIMEOUT_S = 240.0
PORT_TRIES = 3  # a free port is free until the server binds it: another process may first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m radixrt.launch_server` in its own process group, logging to a file."""

    def __init__(
        self, model_path: Path, log_path: Path, *flags: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = [
            sys.executable,
            "-m",
            "radixrt.launch_server",
            "--model-path",
            str(model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-total-tokens",
            "4096",
            *flags,
        ]
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        self.headers: dict[str, str] = {}

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"server not ready after {START_TIMEOUT_S} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def get(self, path: str, **kw: Any) -> httpx.Response:
        headers = {**self.headers, **kw.pop("headers", {})}
        return httpx.get(self.url + path, headers=headers, timeout=60, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("timeout", 120)
        headers = {**self.headers, **kw.pop("headers", {})}
        return httpx.post(self.url + path, headers=headers, **kw)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {**self.headers, **kw.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=60, **kw)

    def patch(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("PATCH", path, **kw)

    def delete(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("DELETE", path, **kw)

    def scheduler_pid(self) -> int:
        """The scheduler child's pid (found by parent pid and command line in /proc: the
        server's grammar workers are its children too)."""
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                is_child = int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid
                if is_child and b"radixrt.scheduler.process" in cmdline:
                    return int(entry)
        raise AssertionError("no scheduler process found")

    def wait_idle_and_whole(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Poll /get_server_info until nothing runs; then the pool must be whole."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.get("/get_server_info").json()
            idle = (
                info["num_running_reqs"] == 0
                and info["num_queued_reqs"] == 0
                and info["num_inflight_reqs"] == 0
            )
            if idle or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert idle, f"server still busy: {info}"
        total = (
            info["free_tokens"]
            + info["evictable_tokens"]
            + info["protected_tokens"]
            + info["pinned_tokens"]
        )
        assert total == info["max_total_tokens"], info
        assert info["protected_tokens"] == 0, f"slots still locked while idle: {info}"
        return info

    def assert_serving(self) -> None:
        """/health answers 200 within a second, a normal request is served, the pool whole."""
        t0 = time.monotonic()
        assert self.get("/health").status_code == 200
        assert time.monotonic() - t0 < 1.0, "/health took over a second"
        r = self.post(
            "/generate",
            json={"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0}},
        )
        assert r.status_code == 200, r.text
        self.wait_idle_and_whole()

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL whatever is left of it."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def start_server(
    model_path: Path, tmp: Path, *flags: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """A ready server; started again on another port (at most PORT_TRIES times in all) when
    another process bound the free port it was given before it did."""
    for attempt in range(1, PORT_TRIES + 1):
        server = ServerProcess(model_path, tmp / "server.log", *flags, env=env)
        try:
            server.wait_ready()
            return server
        except BaseException:
            server.stop()
            if attempt == PORT_TRIES or "address already in use" not in server.log():
                raise
    raise AssertionError("unreachable")
