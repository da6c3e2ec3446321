"""Keys through Ray Serve (docs/reliability.md, "Smaller items"): the ingress passes the
client's Authorization (and session) header to the replica, whose radixrt server checks it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys

import httpx
import pytest

from radixrt.serve.ray.replica import RadixrtReplica
from tests.router.recording_worker import RecordingWorker

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is in the test extra: pip install -e '.[test]'", allow_module_level=True)

INGRESS_PROBE = r"""
import asyncio, json
from starlette.requests import Request
from radixrt.serve.ray.app import RadixrtIngress

seen = []

class Method:
    def __init__(self, name):
        self.name = name
    async def remote(self, *args):
        seen.append([self.name, *args])
        return 200, {"ok": True}

class Replicas:
    forward, get = Method("forward"), Method("get")

async def main():
    cls = RadixrtIngress.func_or_class
    ingress = cls.__new__(cls)
    ingress.replicas = Replicas()
    body = b'{"text": "hi"}'
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}
    headers = [(b"authorization", b"Bearer key-a"), (b"x-session-id", b"s1"),
               (b"content-type", b"application/json"), (b"cookie", b"c=1")]
    scope = {"type": "http", "method": "POST", "path": "/generate", "headers": headers}
    await ingress._forward("/generate", Request(scope, receive))
    await ingress.models(Request({**scope, "method": "GET"}, receive))
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_the_ingress_passes_the_clients_key_on() -> None:
    out = subprocess.run([sys.executable, "-c", INGRESS_PROBE], capture_output=True, text=True,
                         timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    forward, get = json.loads(out.stdout.strip().splitlines()[-1])
    key = {"authorization": "Bearer key-a", "x-session-id": "s1"}  # no cookie, no type
    assert forward == ["forward", "/generate", {"text": "hi"}, key]
    assert get == ["get", "/v1/models", key]


def test_the_replica_sends_the_clients_key_to_its_server() -> None:
    worker = RecordingWorker(key="key-a")

    class Running:  # the server process, as the replica sees it
        exited: int | None = None

        def poll(self) -> int | None:
            return self.exited

    async def go() -> list[int]:
        replica = RadixrtReplica.__new__(RadixrtReplica)
        replica.url, replica.proc = worker.url, Running()
        codes = []
        async with httpx.AsyncClient() as replica.client:
            for headers in ({"authorization": "Bearer key-a"}, None):
                status, _ = await replica.forward("/generate", {"text": "hi"}, headers)
                codes.append(status)
        replica.proc.exited = 0  # nothing for the replica to stop
        return codes

    try:
        assert asyncio.run(go()) == [200, 401]  # the server's own check decides
    finally:
        worker.close()
