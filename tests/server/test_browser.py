"""What a web page can do to a server without keys (the default): a `text/plain` or form POST
gets 415, a foreign Origin 403, a DNS-rebinding Host 421, and none of them runs anything;
localhost, IP and `--allowed-hosts` names, same-origin pages (the dashboard), an origin of
`--allowed-origins` (with CORS headers and preflight) and the OpenAI SDK still work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.web_client import raw_request

from .server_proc import start_server

HI = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 2}}).encode()
JSON = {"Content-Type": "application/json"}
EVIL = "http://evil.example"
APP = "https://app.example.com"


@pytest.fixture(scope="module")
def server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("browser")
    server = start_server(
        tiny_llama_path, tmp, "--allowed-hosts", "models.internal", "--allowed-origins", APP
    )
    try:
        yield server
    finally:
        server.stop()


def _generated(server: Any) -> int:
    """Requests the server has finished (prompt tokens counted per finished request)."""
    return int(server.get("/get_server_info").json()["prompt_tokens"])


def test_a_page_cannot_post_without_json(server) -> None:
    before = _generated(server)
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                  None):  # fmt: skip
        headers = {"Content-Type": ctype} if ctype else {}
        status, _, body = raw_request(server.url, "POST", "/generate", HI, headers)
        assert status == 415 and b"application/json" in body, (ctype, status, body)
    status, _, _ = raw_request(server.url, "POST", "/flush_cache?disk=true", b"x=1",
                               {"Content-Type": "text/plain"})  # fmt: skip
    assert status == 415
    assert _generated(server) == before  # nothing ran
    for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
        status, _, body = raw_request(server.url, "POST", "/generate", HI, {"Content-Type": ctype})
        assert status == 200, (ctype, body)


def test_a_foreign_origin_is_refused(server) -> None:
    before = _generated(server)
    for origin in (EVIL, "null", "http://127.0.0.1:1", "https://app.example.com.evil.example"):
        status, _, body = raw_request(server.url, "POST", "/generate", HI,
                                      {**JSON, "Origin": origin})  # fmt: skip
        assert status == 403 and b"--allowed-origins" in body, (origin, status)
    status, _, _ = raw_request(server.url, "POST", "/flush_cache?disk=true", None, {"Origin": EVIL})
    assert status == 403
    assert raw_request(server.url, "GET", "/get_server_info", None, {"Origin": EVIL})[0] == 403
    assert _generated(server) == before


def test_same_origin_and_allowed_origins_work(server) -> None:
    own = server.url  # the dashboard's page is served from here
    assert raw_request(server.url, "GET", "/dashboard", None)[0] == 200
    assert raw_request(server.url, "GET", "/dashboard/data", None, {"Origin": own})[0] == 200
    status, _, _ = raw_request(server.url, "POST", "/generate", HI, {**JSON, "Origin": own})
    assert status == 200
    status, headers, _ = raw_request(server.url, "POST", "/generate", HI, {**JSON, "Origin": APP})
    assert status == 200 and headers["access-control-allow-origin"] == APP
    asks = {"Origin": APP, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization"}  # fmt: skip
    status, headers, _ = raw_request(server.url, "OPTIONS", "/v1/chat/completions", None, asks)
    assert status == 204 and headers["access-control-allow-origin"] == APP
    assert "authorization" in headers["access-control-allow-headers"]
    status, _, _ = raw_request(server.url, "OPTIONS", "/v1/chat/completions", None,
                               {**asks, "Origin": EVIL})  # fmt: skip
    assert status == 403


def test_a_rebinding_host_is_refused(server) -> None:
    port = server.port
    for host in (f"evil.example:{port}", "rebind.attacker.test", f"models.internal.evil:{port}",
                 "bad host", f"127.0.0.1:{port}x"):  # fmt: skip
        status, _, body = raw_request(server.url, "GET", "/get_server_info", None, {"Host": host})
        assert status in (400, 421), (host, status)
        if status == 421:
            assert b"--allowed-hosts" in body
    rebound = f"rebind.attacker.test:{port}"
    page = {**JSON, "Host": rebound, "Origin": f"http://{rebound}"}
    status, _, _ = raw_request(server.url, "POST", "/generate", HI, page)
    assert status == 421
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST",
                 f"models.internal:{port}", f"dash.localhost:{port}", "10.1.2.3"):  # fmt: skip
        status, _, _ = raw_request(server.url, "GET", "/get_server_info", None, {"Host": host})
        assert status == 200, host


def test_the_openai_sdk_still_works(server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    out = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert out.choices[0].message.content is not None
    client.close()
