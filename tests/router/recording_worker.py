"""A stand-in worker that records every request it gets (method, path with query, headers) and
answers 200 with a small JSON body; with `key` set it answers 401 to any other credential,
as a worker started with that --service-key-file does, and its /v1/usage names the tenant of
x-radixrt-tenant. Closed by `close()` (server shut down, its thread joined)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OK = {"text": "fine", "output_ids": [1], "meta_info": {}}
SERVICE_KEY = "service-key-of-the-router-0123"


class RecordingWorker:
    def __init__(self, key: str | None = None) -> None:
        self.key = key
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        worker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def do_DELETE(self) -> None:
                self._handle()

            def do_PATCH(self) -> None:
                self._handle()

            def _handle(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                if self.path != "/health":
                    worker.seen.append((self.command, self.path, headers))
                given = headers.get("authorization", "")
                if self.path != "/health" and worker.key and given != f"Bearer {worker.key}":
                    self._answer(401, {"error": {"message": "missing or wrong API key"}})
                elif self.path == "/v1/usage":
                    self._answer(200, {"tenant": headers.get("x-radixrt-tenant")})
                else:
                    self._answer(200, {"status": "ok"} if self.command == "GET" else OK)

            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def paths(self) -> list[str]:
        """The paths of the requests it got, but the router's own safety check."""
        return [path for _, path, _ in self.seen if not _is_check(path)]

    def requests(self) -> list[tuple[str, str, dict[str, str]]]:
        return [r for r in self.seen if not _is_check(r[1])]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def _is_check(path: str) -> bool:
    return path in ("/get_server_info", "/v1/usage")
