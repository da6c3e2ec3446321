"""Tenants through the standalone router: its routing trees keep each tenant's (or, without a
key file of its own, each client key's) prompts apart, and with --api-key-file it checks keys,
keeps its server-wide endpoints for admins and passes each client's key on to the workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from radixrt.core.config import RouterConfig
from radixrt.serve.placement.cache_aware import CacheAwarePolicy
from radixrt.serve.placement.policy import WorkerLoad
from radixrt.serve.placement.route_keys import route_request
from tests.router.recording_worker import SERVICE_KEY, RecordingWorker
from tests.router.test_router_server import RouterProcess

PROMPT = {"text": "The system prompt of tenant A. " * 20}


def test_route_keys_are_per_owner_and_salt() -> None:
    plain = route_request("/generate", PROMPT, None)
    a = route_request("/generate", PROMPT, None, "tenant:a")
    b = route_request("/generate", PROMPT, None, "tenant:b")
    salted = route_request("/generate", {**PROMPT, "cache_salt": "s"}, None, "tenant:a")
    assert plain.key == PROMPT["text"]
    assert len({a.key[0], b.key[0], salted.key[0]}) == 3
    assert tuple(a.key[1:]) == tuple(PROMPT["text"])  # the prompt itself follows
    sess = route_request("/v1/completions", {"prompt": "x", "user": "u"}, None, "tenant:a")
    assert sess.session != "u" and sess.session.endswith("u")
    body = {"system": "S", "messages": [{"role": "user", "content": "Q"}]}
    assert route_request("/v1/messages", body, None).key == "system: S\nuser: Q\n"


def test_a_tenant_gets_no_affinity_from_another_tenants_prompt() -> None:
    """B's request for A's cached prompt is routed as a cold prompt would be, so where it
    lands tells B nothing about A."""
    policy = CacheAwarePolicy(RouterConfig(cache_threshold=0.5))
    workers = [WorkerLoad("w0", 0), WorkerLoad("w1", 0)]
    a = route_request("/generate", PROMPT, None, "tenant:a")
    home = policy.select(a, workers)
    for _ in range(3):
        assert policy.select(a, workers) == home  # A sticks to where its prefix is
    b = route_request("/generate", PROMPT, None, "tenant:b")
    assert all(policy._tree(w.worker_id).match(b.key) == 0 for w in workers)


@pytest.fixture
def keyed(tmp_path) -> Iterator[tuple[list[RecordingWorker], RouterProcess]]:
    keys = [
        {"key": "key-a", "tenant": "a", "role": "user"},
        {"key": "key-ops", "tenant": "ops", "role": "admin"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    (tmp_path / "service.key").write_text(SERVICE_KEY)
    workers = [RecordingWorker(SERVICE_KEY), RecordingWorker(SERVICE_KEY)]
    router = RouterProcess(
        [w.url for w in workers], tmp_path / "router.log", "--api-key-file",
        str(tmp_path / "keys.json"), "--service-key-file", str(tmp_path / "service.key"),
    )  # fmt: skip
    try:
        yield workers, router
    finally:
        router.stop()
        for w in workers:
            w.close()


def _post(router: RouterProcess, path: str, key: str | None, **kw: Any) -> httpx.Response:
    headers = {"x-api-key": key} if key else {}
    return httpx.post(router.url + path, headers=headers, timeout=30, **kw)


def test_router_key_file_checks_keys_and_keeps_admin_endpoints(keyed) -> None:
    workers, router = keyed
    assert _post(router, "/generate", None, json=PROMPT).status_code == 401
    assert _post(router, "/generate", "wrong", json=PROMPT).status_code == 401
    assert _post(router, "/generate", "key-a", json=PROMPT).status_code == 200
    assert sum(len(w.paths()) for w in workers) == 1  # one request reached a worker
    user, admin = {"x-api-key": "key-a"}, {"Authorization": "Bearer key-ops"}
    for path in ("/get_server_info", "/metrics"):
        assert httpx.get(router.url + path, headers=user, timeout=30).status_code == 403
    assert _post(router, "/flush_cache", "key-a").status_code == 403
    assert httpx.get(router.url + "/get_server_info", headers=admin, timeout=30).status_code == 200
    assert httpx.get(router.url + "/health", timeout=30).status_code == 200  # no key needed
