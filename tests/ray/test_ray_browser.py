"""The Ray ingress runs the server's and the router's browser check (radixrt/serve/web/browser.py)
on its configured hosts and origins: a `text/plain` POST gets 415, a foreign Origin 403, a
rebinding Host 421, before any replica is asked. Checked on the ingress's ASGI app in a
process of its own (no Ray cluster, no Ray state in the test process); the flags of
`python -m radixrt.serve.ray` take their defaults from BrowserConfig and RouterConfig."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys

import pytest

from radixrt.core.config import BrowserConfig, RouterConfig, ServerConfig

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is in the test extra: pip install -e '.[test]'", allow_module_level=True)

PROBE = r"""
import json
from starlette.testclient import TestClient
from radixrt.core.config import BrowserConfig
from radixrt.serve.ray import app as ingress

ingress._BROWSER[0] = BrowserConfig(allowed_hosts="ray.internal")
client = TestClient(ingress.api, base_url="http://127.0.0.1:8000")
body = b'{"text": "hi"}'
out = {
    "text_plain": client.post("/generate", content=body,
                              headers={"content-type": "text/plain"}).status_code,
    "no_type": client.post("/v1/completions", content=body).status_code,
    "origin": client.post("/generate", json={"text": "hi"},
                          headers={"origin": "http://evil.example"}).status_code,
    "host": client.get("/v1/models", headers={"host": "rebind.attacker.test"}).status_code,
    "named_host_origin": client.post("/generate", json={}, headers={
        "host": "ray.internal:8000", "origin": "http://evil.example"}).status_code,
}
client.close()
print(json.dumps(out))
"""


def test_the_ingress_refuses_pages() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    codes = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == {"text_plain": 415, "no_type": 415, "origin": 403, "host": 421,
                     "named_host_origin": 403}, codes  # fmt: skip


LIMIT_PROBE = r"""
import json
from fastapi import Request
from starlette.testclient import TestClient
from radixrt.serve.ray import app as ingress

ingress._MAX_REQUEST_BYTES[0] = 1000


@ingress.api.post("/probe/read")  # the ingress's routes need a Ray replica: one that reads
async def read(request: Request) -> dict:
    return {"bytes": len(await request.body())}


client = TestClient(ingress.api, base_url="http://127.0.0.1:8000")
big = json.dumps({"text": "x" * 2000}).encode()
chunks = iter([b'{"text": "'] + [b"y" * 200] * 10 + [b'"}'])
out = {
    "length": client.post("/generate", content=big,
                          headers={"content-type": "application/json"}).status_code,
    "chunked": client.post("/probe/read", content=chunks,
                           headers={"content-type": "application/json"}).status_code,
    "small": client.post("/probe/read", content=b"{}",
                         headers={"content-type": "application/json"}).json(),
}
client.close()
print(json.dumps(out))
"""


def test_the_ingress_refuses_big_bodies() -> None:
    out = subprocess.run([sys.executable, "-c", LIMIT_PROBE], capture_output=True, text=True,
                         timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "length": 413,
        "chunked": 413,
        "small": {"bytes": 2},
    }


def test_ray_flags_default_to_the_dataclasses() -> None:
    from radixrt.serve.ray.__main__ import make_parser

    parser = make_parser()
    for cls in (RouterConfig, BrowserConfig):
        for f in dataclasses.fields(cls):
            assert parser.get_default(f.name) == f.default, (cls.__name__, f.name)
    args = parser.parse_args(["serve", "--allowed-hosts", "a.example", "--allowed-origins", "*"])
    assert (args.allowed_hosts, args.allowed_origins) == ("a.example", "*")
    assert parser.get_default("max_request_bytes") == ServerConfig.max_request_bytes


def test_no_local_cluster_without_token_authentication(monkeypatch, capsys) -> None:
    """Ray's GCS and raylet listen on every interface: a cluster this command starts must
    have Ray's token authentication; joining --address is the operator's cluster."""
    from radixrt.serve.ray.__main__ import main, unauthenticated_cluster

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert unauthenticated_cluster(None) is None  # the installed Ray turns tokens on
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert unauthenticated_cluster("auto") is None
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--", "--model-path", "x"])  # refused before ray.init
    assert exc.value.code == 2
    assert "RAY_AUTH_MODE=disabled" in capsys.readouterr().err
    import ray

    assert not ray.is_initialized()
