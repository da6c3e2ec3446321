"""The router without keys, as a web page sees it: a `text/plain` POST gets 415, a foreign
Origin 403 (its /flush_cache never reaches a worker), a DNS-rebinding Host 421; localhost,
IPs and `--allowed-hosts` names, and JSON from clients without Origin, pass as before."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.router.recording_worker import RecordingWorker
from tests.router.test_router_server import RouterProcess
from tests.web_client import raw_request

HI = json.dumps({"text": "hi"}).encode()
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def routed(tmp_path) -> Iterator[tuple[RecordingWorker, RouterProcess]]:
    worker = RecordingWorker()
    router = None
    try:
        router = RouterProcess(
            [worker.url], tmp_path / "router.log", "--allowed-hosts", "router.internal"
        )
        yield worker, router
    finally:
        if router is not None:
            router.stop()
        worker.close()


def test_pages_are_refused_before_any_worker(routed) -> None:
    worker, router = routed
    port = router.url.rsplit(":", 1)[1]
    plain = {"Content-Type": "text/plain"}
    assert raw_request(router.url, "POST", "/generate", HI, plain)[0] == 415
    assert raw_request(router.url, "POST", "/generate", HI)[0] == 415  # no content type
    evil = {"Origin": "http://evil.example"}
    assert raw_request(router.url, "POST", "/flush_cache?disk=true", None, evil)[0] == 403
    assert raw_request(router.url, "POST", "/generate", HI, {**JSON, **evil})[0] == 403
    rebound = {"Host": f"rebind.attacker.test:{port}"}
    assert raw_request(router.url, "GET", "/get_server_info", None, rebound)[0] == 421
    assert raw_request(router.url, "POST", "/generate", HI, {**JSON, **rebound})[0] == 421
    assert worker.paths() == []  # nothing reached the worker


def test_clients_still_pass(routed) -> None:
    worker, router = routed
    port = router.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"router.internal:{port}"):
        status, _, body = raw_request(router.url, "POST", "/generate", HI, {**JSON, "Host": host})
        assert status == 200, (host, body)
    ctype = {"Content-Type": "application/json; charset=utf-8"}
    assert raw_request(router.url, "POST", "/v1/completions", HI, ctype)[0] == 200
    assert raw_request(router.url, "POST", "/flush_cache", None)[0] == 200  # curl -X POST
    assert worker.paths() == ["/generate"] * 3 + ["/v1/completions", "/flush_cache"]
