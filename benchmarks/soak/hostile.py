"""The soak's hostile kinds, sent on a raw request line (http.client: nothing normalised): a
path with dot segments (raw or percent-encoded) aimed at the admin routes, a web page's
foreign Origin, a DNS-rebinding Host, a `text/plain` body. Each must be refused with its 4xx
and a JSON `error.message` (docs/reliability.md: "The router's paths", "Browsers")."""

from __future__ import annotations

import http.client
import json
import random

import httpx

from benchmarks.soak.outcome import TIMEOUT_S, Kind, Outcome, SoakContext

HI = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 2}}).encode()
JSON = {"Content-Type": "application/json"}
FORM = "application/x-www-form-urlencoded"
# kind -> (expected status, [(variant, method, target, body, headers)])
HOSTILE_CASES: dict[str, tuple[int, list[tuple[str, str, str, bytes | None, dict[str, str]]]]] = {
    "hostile_dot_path": (400, [
        ("raw ..", "POST", "/v1beta/models/../../flush_cache?disk=true", None, {}),
        ("%2e%2e", "POST", "/v1beta/models/%2e%2e/%2e%2e/flush_cache", None, {}),
        ("%2E.", "GET", "/v1beta/models/%2E./%2E%2E/get_server_info", None, {}),
        ("..%2f", "GET", "/v1beta/models/..%2f..%2fdashboard/data", None, {}),
    ]),
    "hostile_origin": (403, [
        ("evil page", "POST", "/generate", HI, {**JSON, "Origin": "http://evil.example"}),
        ("null origin", "POST", "/flush_cache?disk=true", None, {"Origin": "null"}),
    ]),
    "hostile_host": (421, [
        ("rebinding", "GET", "/get_server_info", None, {"Host": "rebind.attacker.test"}),
        ("rebinding page", "POST", "/generate", HI,
         {**JSON, "Host": "rebind.attacker.test:80", "Origin": "http://rebind.attacker.test"}),
    ]),
    "hostile_text_plain": (415, [
        ("text/plain", "POST", "/generate", HI, {"Content-Type": "text/plain"}),
        ("form", "POST", "/v1/caches", b"text=x", {"Content-Type": FORM}),
    ]),
}  # fmt: skip


def _hostile(kind: str, c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    expected, variants = HOSTILE_CASES[kind]
    variant, method, target, body, headers = rng.choice(variants)
    url = c.base_url
    conn = http.client.HTTPConnection(url.host, url.port, timeout=TIMEOUT_S)
    try:
        given = dict(headers)
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", given.pop("Host", f"{url.host}:{url.port}"))
        for k, v in given.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        resp = conn.getresponse()
        status, raw = resp.status, resp.read()
    except (OSError, http.client.HTTPException) as e:
        return Outcome(None, False, variant, f"{type(e).__name__}: {e}")
    finally:
        conn.close()
    try:
        message = str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return Outcome(status, False, variant, f"(not a JSON error) {raw[:200]!r}")
    return Outcome(status, status == expected, variant, message)


def hostile_kinds() -> dict[str, tuple[float, Kind]]:
    """name -> (weight, kind), as cases.KINDS."""

    def kind(name: str) -> Kind:
        return lambda c, rng, ctx: _hostile(name, c, rng, ctx)

    return {name: (0.5, kind(name)) for name in HOSTILE_CASES}
