"""The service key between the router and its workers: the router checks its tenants' keys and
passes each request's tenant to the workers with the service key, which alone makes them
believe it. Behind it tenant B gets no hit on tenant A's prompt, and the router's own calls
(server info, flush) work; on a worker a user key naming another tenant in the header stays
its own tenant. The router refuses to start over a worker that answers without a key, or that
refuses its credential, or with tenants and no service key, each with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.router.recording_worker import SERVICE_KEY, RecordingWorker
from tests.router.test_router_server import RouterProcess
from tests.server.server_proc import free_port, start_server

KEYS = {"a": "key-of-tenant-a", "b": "key-of-tenant-b", "ops": "key-of-ops"}
SECRET = "The system prompt of tenant A: " + " ".join(f"rule {i} is kept." for i in range(60))


def _files(tmp: Path) -> tuple[Path, Path]:
    keys = tmp / "keys.json"
    entries = [{"key": KEYS[t], "tenant": t, "role": "admin" if t == "ops" else "user"}
               for t in KEYS]  # fmt: skip
    keys.write_text(json.dumps({"keys": entries}))
    service = tmp / "service.key"
    service.write_text(SERVICE_KEY + "\n")
    return keys, service


@pytest.fixture(scope="module")
def stack(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A worker that trusts only the service key (and knows tenant b's key for the header
    check), behind a router with the tenants' keys."""
    tmp = tmp_path_factory.mktemp("service_key")
    keys, service = _files(tmp)
    only_b = tmp / "worker_keys.json"
    only_b.write_text(json.dumps({"keys": [{"key": KEYS["b"], "tenant": "b"}]}))
    worker = start_server(tiny_llama_path, tmp, "--service-key-file", str(service),
                          "--api-key-file", str(only_b))  # fmt: skip
    router = None
    try:
        router = RouterProcess([worker.url], tmp / "router.log", "--api-key-file", str(keys),
                               "--service-key-file", str(service))  # fmt: skip
        yield worker, router
    finally:
        if router is not None:
            router.stop()
        worker.stop()


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS.get(who, who)}"}


def _cached(url: str, who: str) -> int:
    body = {"text": SECRET, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    r = httpx.post(url + "/generate", json=body, headers=_auth(who), timeout=60)
    assert r.status_code == 200, r.text
    return int(r.json()["meta_info"]["cached_tokens"])


def test_tenants_stay_apart_behind_the_router(stack) -> None:
    worker, router = stack
    _cached(router.url, "a")
    assert _cached(router.url, "a") > 100
    assert _cached(router.url, "b") == 0  # B's guess at A's prompt: no hit
    info = httpx.get(router.url + "/get_server_info", headers=_auth("ops"), timeout=30).json()
    assert info["workers"][0]["prompt_tokens"] is not None  # the router's own call got in
    r = httpx.post(router.url + "/flush_cache", headers=_auth("ops"), timeout=30)
    assert r.status_code == 200, r.text


def test_the_worker_believes_the_tenant_header_only_with_the_service_key(stack) -> None:
    worker, _ = stack
    claim = {"x-radixrt-tenant": "a", "x-radixrt-role": "admin"}
    r = httpx.get(worker.url + "/v1/usage", headers={**_auth("b"), **claim}, timeout=30)
    assert r.status_code == 200 and r.json()["tenant"] == "b"
    assert httpx.get(worker.url + "/get_server_info", headers={**_auth("b"), **claim},
                     timeout=30).status_code == 403  # fmt: skip
    service = {"Authorization": f"Bearer {SERVICE_KEY}"}
    r = httpx.get(worker.url + "/v1/usage", headers={**service, **claim}, timeout=30)
    assert r.status_code == 200 and r.json()["tenant"] == "a"
    assert httpx.get(worker.url + "/get_server_info", headers=service).status_code == 200
    assert httpx.get(worker.url + "/get_server_info").status_code == 401
    bad = {**service, "x-radixrt-tenant": "a/../b"}
    assert httpx.get(worker.url + "/v1/usage", headers=bad, timeout=30).status_code == 400


def _router_start(tmp: Path, worker: RecordingWorker, *flags: str) -> tuple[int, str]:
    """Start a router over `worker`; its exit code and output (it must not keep serving)."""
    cmd = [sys.executable, "-m", "radixrt.serve.router", "--worker-urls", worker.url,
           "--port", str(free_port()), *flags]  # fmt: skip
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the router started over an unsafe worker")
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("case", ["keyless worker", "no service key", "wrong service key"])
def test_unsafe_combinations_are_refused_at_start(tmp_path: Path, case: str) -> None:
    keys, service = _files(tmp_path)
    wrong = tmp_path / "wrong.key"
    wrong.write_text("another-service-key-456789")
    worker_key, flags, expect = {
        "keyless worker": (None, ["--api-key-file", str(keys), "--service-key-file",
                                  str(service)], "answers without a key"),
        "no service key": (SERVICE_KEY, ["--api-key", "k" * 20], "refuses the router's own"),
        "wrong service key": (SERVICE_KEY, ["--api-key-file", str(keys), "--service-key-file",
                                            str(wrong)], "refuses the router's own"),
    }[case]  # fmt: skip
    worker = RecordingWorker(worker_key)
    try:
        code, out = _router_start(tmp_path, worker, *flags)
    finally:
        worker.close()
    assert code != 0 and expect in out and "--service-key-file" in out, out[-2000:]


def test_tenants_without_a_service_key_are_a_usage_error(tmp_path: Path) -> None:
    keys, _ = _files(tmp_path)
    worker = RecordingWorker()
    try:
        code, out = _router_start(tmp_path, worker, "--api-key-file", str(keys))
    finally:
        worker.close()
    assert code == 2 and "service_key_file" in out, out[-2000:]
