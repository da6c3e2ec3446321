"""The router's body limit (`--max-request-bytes`, as the server's): a body over it gets 413
from its Content-Length at once, or while a chunked body is read, and never reaches a worker."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

from tests.router.recording_worker import RecordingWorker
from tests.router.test_router_server import RouterProcess
from tests.web_client import raw_request

LIMIT = 1000
JSON = {"Content-Type": "application/json"}


def _chunked(base_url: str, path: str, chunks: Iterator[bytes]) -> tuple[int, bytes]:
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    try:
        conn.request("POST", path, body=chunks, headers=JSON, encode_chunked=True)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_bodies_over_the_limit_get_413_and_reach_no_worker(tmp_path) -> None:
    worker = RecordingWorker()
    router = None
    try:
        router = RouterProcess(
            [worker.url], tmp_path / "router.log", "--max-request-bytes", str(LIMIT)
        )
        big = json.dumps({"text": "x" * 2 * LIMIT}).encode()
        status, _, body = raw_request(router.url, "POST", "/generate", big, JSON)
        assert status == 413 and b"--max-request-bytes" in body
        status, body = _chunked(router.url, "/v1/completions", iter([b'{"prompt": "'] +
                                [b"y" * 200] * 10 + [b'"}']))  # fmt: skip
        assert status == 413 and b"--max-request-bytes" in body
        assert worker.paths() == []
        small = json.dumps({"text": "hi"}).encode()
        assert raw_request(router.url, "POST", "/generate", small, JSON)[0] == 200
        assert worker.paths() == ["/generate"]
    finally:
        if router is not None:
            router.stop()
        worker.close()
