"""Path traversal through the router: a user key sends dot segments (raw and percent-encoded,
on a raw request line that nothing normalises) at the router's forwarding routes; each is
refused with 400 and the worker behind it never sees an admin path (/flush_cache,
/get_server_info, /dashboard/data) nor a dot segment. Ordinary requests still pass, on the
paths the router builds from checked parts."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.router.recording_worker import SERVICE_KEY, RecordingWorker
from tests.router.test_router_server import RouterProcess

USER, ADMIN = "key-of-a", "key-of-ops"
ADMIN_PATHS = ("/flush_cache", "/get_server_info", "/dashboard", "/metrics")
ATTACKS = [
    ("POST", "/v1beta/models/../../flush_cache?disk=true"),
    ("POST", "/v1beta/models/%2e%2e/%2e%2e/flush_cache"),
    ("POST", "/v1beta/models/%2E./%2E%2E/flush_cache"),
    ("POST", "/v1beta/models/.%2e/.%2e/flush_cache"),
    ("POST", "/v1beta/models/..%2f..%2fflush_cache"),
    ("POST", "/v1beta/models/x:generateContent/../../../flush_cache"),
    ("POST", "/v1beta/models/./../../flush_cache"),
    ("GET", "/v1beta/models/../../get_server_info"),
    ("GET", "/v1beta/models/%2e%2e/%2e%2e/dashboard/data"),
    ("GET", "/v1beta/models/..%5c..%5cget_server_info"),
    ("DELETE", "/v1/caches/.."),
    ("GET", "/v1beta/cachedContents/%2e%2e"),
    ("POST", "/generate/../flush_cache"),
]


@pytest.fixture
def routed(tmp_path) -> Iterator[tuple[RecordingWorker, RouterProcess]]:
    keys = [
        {"key": USER, "tenant": "a", "role": "user"},
        {"key": ADMIN, "tenant": "ops", "role": "admin"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    (tmp_path / "service.key").write_text(SERVICE_KEY)
    worker = RecordingWorker(SERVICE_KEY)
    router = None
    try:
        router = RouterProcess(
            [worker.url], tmp_path / "router.log", "--api-key-file", str(tmp_path / "keys.json"),
            "--service-key-file", str(tmp_path / "service.key"),
        )  # fmt: skip
        yield worker, router
    finally:
        if router is not None:
            router.stop()
        worker.close()


def _raw(router: RouterProcess, method: str, target: str, key: str) -> tuple[int, bytes]:
    """`method target` sent as is on the request line (http.client does not normalise)."""
    url = urlsplit(router.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        body = b'{"contents": []}' if method in ("POST", "PATCH") else None
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_dot_segments_never_reach_the_worker(routed) -> None:
    worker, router = routed
    answers = {target: _raw(router, method, target, USER) for method, target in ATTACKS}
    reached = worker.paths()
    assert not [p for p in reached if p.startswith(ADMIN_PATHS)], (reached, answers)
    assert not [p for p in reached if ".." in p or "%2" in p.lower()], reached
    assert {t: code for t, (code, _) in answers.items() if code != 400} == {}, answers
    for _, body in answers.values():
        assert b"path" in body  # the 400 says what is wrong


def test_checked_routes_still_pass(routed) -> None:
    worker, router = routed
    code, _ = _raw(router, "POST", "/v1beta/models/smol-2.5:streamGenerateContent?alt=sse",
                   USER)  # fmt: skip
    assert code == 200
    assert worker.paths()[-1] == "/v1beta/models/smol-2.5:streamGenerateContent?alt=sse"
    assert _raw(router, "POST", "/v1beta/models/smol:deleteEverything", USER)[0] == 404
    assert _raw(router, "GET", "/v1beta/models/smol", USER)[0] == 200
    assert worker.paths()[-1] == "/v1beta/models/smol"
    assert _raw(router, "DELETE", "/v1/caches/abc123", USER)[0] == 200
    assert worker.paths()[-1] == "/v1/caches/abc123"
    assert _raw(router, "DELETE", "/v1/caches/a.b", USER)[0] == 400
    # An admin's own /flush_cache is the router's, which calls the workers' on purpose.
    assert _raw(router, "POST", "/flush_cache", ADMIN)[0] == 200
