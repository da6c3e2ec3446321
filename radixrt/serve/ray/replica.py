"""`RadixrtReplica`: the body of one Ray Serve replica, a radixrt server it owns.

The replica starts `python -m radixrt.launch_server` on 127.0.0.1 and a free port with the
server flags it was given (model, pool, cache flags...), waits for its /health, and forwards
each `(path, body)` to it. Ray's health check calls `check_health`, which fails when the
server process has exited or its /health does not answer 200; Ray then replaces the replica,
and `__del__` (a graceful stop) or the watchdog (a killed replica) ends the server.
`record_routing_stats` reports the server's queue to Ray.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

START_TIMEOUT_S = 300.0
# The client's headers the ingress passes on: its key, checked by the replica's server
# (`--api-key` / `--api-key-file` among the server flags), which also takes its tenant from it.
CLIENT_HEADERS = ("authorization", "x-api-key", "x-session-id")


class ServerUnavailableError(RuntimeError):
    """The replica's radixrt server cannot be reached (it died or is restarting): the request
    never started there and may be sent elsewhere."""


class RadixrtReplica:
    def __init__(self, server_flags: list[str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        server = [sys.executable, "-m", "radixrt.launch_server", *server_flags,
                  "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        # The watchdog (child.py) ends the server when this replica's process is gone, even
        # when Ray kills it without a word.
        cmd = [sys.executable, "-m", "radixrt.serve.ray.child", str(os.getpid()), *server]
        self.proc = subprocess.Popen(cmd, start_new_session=True)
        # A fresh connection per request (no keep-alive): a server that died then fails the
        # connect, which proves the request never started there; on a kept connection it
        # would fail on reading, which cannot tell.
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=5.0),
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"radixrt server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self._stop()
                raise RuntimeError(f"radixrt server not ready after {START_TIMEOUT_S} s")
            time.sleep(0.2)

    async def forward(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """POST `body` to the server's `path` with the client's `headers` (its key:
        CLIENT_HEADERS): (status, JSON answer)."""
        if self.proc.poll() is not None:
            raise ServerUnavailableError(f"radixrt server exited with {self.proc.returncode}")
        try:
            r = await self.client.post(self.url + path, json=body, headers=headers)
        except httpx.ConnectError as e:  # never reached the server: safe to send elsewhere
            raise ServerUnavailableError(str(e)) from e
        except httpx.HTTPError as e:
            # The server died with the request (running, or queued on a listening socket a
            # dying child still held): its answer is lost either way, so it is sent elsewhere;
            # a generation has no effect but its answer. A live server's error is a 502.
            if not await self._alive():
                raise ServerUnavailableError(f"{type(e).__name__} {e}") from e
            message = f"the replica's server failed: {type(e).__name__} {e}"
            return 502, {"error": {"message": message, "code": 502}}
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, {"error": {"message": r.text[:500], "code": r.status_code}}

    async def forward_stream(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> AsyncIterator[Any]:
        """POST a streaming `body`: first `{"status": code}`, then the answer's bytes as they
        come (server-sent events). ServerUnavailableError before the first item when the server
        is gone; a server that dies mid-stream ends the stream (what was sent stays sent)."""
        if self.proc.poll() is not None:
            raise ServerUnavailableError(f"radixrt server exited with {self.proc.returncode}")
        try:
            async with self.client.stream("POST", self.url + path, json=body, headers=headers) as r:
                yield {"status": r.status_code}
                async for chunk in r.aiter_raw():
                    yield chunk
        except httpx.ConnectError as e:
            raise ServerUnavailableError(str(e)) from e
        except httpx.HTTPError:
            return

    async def _alive(self) -> bool:
        await asyncio.sleep(0.6)  # the watchdog polls its server twice a second
        if self.proc.poll() is not None:
            return False
        try:
            return (await self.client.get(self.url + "/health", timeout=2)).status_code == 200
        except httpx.HTTPError:
            return False

    async def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        r = await self.client.get(self.url + path, headers=headers)
        return r.status_code, r.json()

    async def check_health(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"radixrt server exited with {self.proc.returncode}")
        try:
            r = await self.client.get(self.url + "/health", timeout=5)
        except httpx.HTTPError as e:
            raise RuntimeError(f"radixrt server /health: {e}") from e
        if r.status_code != 200:
            raise RuntimeError(f"radixrt server /health: {r.status_code} {r.text[:200]}")

    async def record_routing_stats(self) -> dict[str, Any]:
        try:
            _, info = await self.get("/get_server_info")
        except (httpx.HTTPError, ValueError):
            return {}
        return {k: info.get(k) for k in ("num_running_reqs", "num_queued_reqs", "cache_hit_rate")}

    def __del__(self) -> None:
        self._stop()

    def _stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
