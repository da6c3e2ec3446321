"""The router sends a request to another worker only when it certainly never started: the
connection could not be made, or the worker refused it with its not-started mark. A worker
that dropped the connection after reading the request may have started it: 502, no retry."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from radixrt.serve.web.middleware import NOT_STARTED_HEADER
from tests.router.test_router_server import RouterProcess
from tests.server.server_proc import free_port

OK = {"text": "fine", "output_ids": [1], "meta_info": {}}


class FakeWorker:
    """A stand-in worker: /health is 200; POSTs answer per `mode` and are counted."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.posts = 0
        worker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(200, {"status": "ok"})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                worker.posts += 1
                if worker.mode == "drop":  # read the request, then die without answering
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif worker.mode == "refuse":
                    self._answer(
                        503, {"error": {"message": "queue full"}}, {NOT_STARTED_HEADER: "1"}
                    )
                elif worker.mode == "busy":  # 503 after starting (say, its scheduler died)
                    self._answer(503, {"error": {"message": "the scheduler failed"}})
                else:
                    self._answer(200, OK)

            def _answer(self, code: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pair(tmp_path) -> Iterator[tuple[FakeWorker, FakeWorker, RouterProcess]]:
    odd, good = FakeWorker("ok"), FakeWorker("ok")
    router = RouterProcess(
        [odd.url, good.url], tmp_path / "router.log", "--router-policy", "round_robin"
    )
    try:
        yield odd, good, router
    finally:
        router.stop()
        odd.close()
        good.close()


def _send(router: RouterProcess, n: int) -> list[int]:
    return [
        httpx.post(router.url + "/generate", json={"text": f"hi {i}"}, timeout=30).status_code
        for i in range(n)
    ]


def test_a_request_the_worker_may_have_started_is_not_retried(pair) -> None:
    odd, good, router = pair
    odd.mode = "drop"
    codes = _send(router, 6)
    assert 502 in codes and set(codes) <= {200, 502}, codes
    assert odd.posts + good.posts == 6  # each request reached exactly one worker
    assert codes.count(502) == odd.posts


def test_a_503_after_starting_is_passed_through(pair) -> None:
    odd, good, router = pair
    odd.mode = "busy"
    codes = _send(router, 6)
    assert odd.posts + good.posts == 6 and codes.count(503) == odd.posts > 0, codes


def test_a_refused_request_goes_to_another_worker(pair) -> None:
    odd, good, router = pair
    odd.mode = "refuse"
    codes = _send(router, 6)
    assert codes == [200] * 6 and good.posts == 6 and odd.posts > 0


def test_an_unreachable_worker_is_skipped(tmp_path) -> None:
    good = FakeWorker("ok")
    router = RouterProcess(
        [f"http://127.0.0.1:{free_port()}", good.url],
        tmp_path / "router.log",
        "--router-policy",
        "round_robin",
    )
    try:
        assert _send(router, 4) == [200] * 4 and good.posts == 4
    finally:
        router.stop()
        good.close()
