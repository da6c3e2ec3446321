"""A raw HTTP call for the security tests: the request line, Host and every header exactly as
given (http.client normalises nothing), so a test can play a web page or an attacker."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit


def raw_request(
    base_url: str,
    method: str,
    target: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers lowercased, body); `headers` may name Host to replace the real one."""
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    try:
        given = dict(headers or {})
        host = given.pop("Host", None) or f"{url.hostname}:{url.port}"
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host)
        for k, v in given.items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()
