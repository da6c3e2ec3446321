"""The soak's malformed kinds (`bad_*`): bad JSON, unknown fields, out-of-range values, prompts
four times the context, thousands of stop strings, broken grammars, 9 MB bodies. Each must be
refused with a 4xx and a JSON `error.message`; anything else is an anomaly."""

from __future__ import annotations

import random
from collections.abc import Iterator
from functools import partial
from typing import Any

import httpx

from benchmarks.soak.outcome import CHAT, Kind, Outcome, SoakContext, error_message

BIG_BODY_BYTES = 9 * 2**20

PATHS = ("/generate", "/v1/completions", CHAT)
HI = [{"role": "user", "content": "hi"}]
JSON_HEADERS = {"content-type": "application/json"}
BAD_VALUES = {"seed": (10**23, -(10**23)), "repetition_penalty": (1e-40,), "temperature": (-1.0,),
              "top_p": (2.0,), "n": (1000,), "max_tokens": (10**6,), "top_k": (-5,),
              "min_p": (7.0,)}  # fmt: skip
BAD_GRAMMARS = (("regex", "(ab["), ("regex", "a{3,1}"), ("regex", "*x"),
                ("json_schema", {"type": "nope"}),
                ("json_schema", {"$ref": "#/nowhere"}))  # fmt: skip
STOPS = {"1000 stop strings": [f"s{i}" for i in range(1000)], "a 10000-char stop": ["x" * 10000]}


def _with(path: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A body for /generate (fields as sampling_params) or chat (fields at the top level)."""
    if path == "/generate":
        return {"text": "hi", "sampling_params": fields}
    return {"messages": HI, **fields}


def _long_prompt(path: str, ctx: SoakContext) -> dict[str, Any]:
    """About four times the context length in tokens."""
    text = "hello " * (4 * ctx.context_length)
    return {"/generate": {"text": text}, CHAT: {"messages": [{"role": "user", "content": text}]}
            }.get(path, {"prompt": text})  # fmt: skip


def _big_body(chunked: bool, ctx: SoakContext) -> bytes | Iterator[bytes]:
    """9 MB of JSON, with a Content-Length or chunked (the server must stop reading either way)."""
    body = b'{"text": "' + b"a" * BIG_BODY_BYTES + b'"}'
    return (body[i : i + 2**16] for i in range(0, len(body), 2**16)) if chunked else body


# kind -> (weight, [(variant, path, body)]); a body is JSON, raw bytes, or made from the context.
BAD: dict[str, tuple[float, list[tuple[str, str, Any]]]] = {
    "bad_json": (1, [(f"{what} {path}", path, raw) for path in (*PATHS, "/abort_request")
                     for what, raw in (("truncated", b'{"text": "hi", '), ("not json", b"nope"),
                                       ("not an object", b"[1, 2]"), ("NUL", b"\x00{}"))]),
    "bad_field": (1, [
        ("sampling temprature", "/generate", _with("/generate", {"temprature": 0})),
        ("top-level streem", "/generate", {"text": "hi", "streem": True}),
        ("completions bogus", "/v1/completions", {"prompt": "hi", "bogus": 1}),
        ("chat tool_choise", CHAT, {"messages": HI, "tool_choise": "auto"}),
        ("max_tokens '5'", "/generate", _with("/generate", {"max_tokens": "5"})),
    ]),
    "bad_value": (1.5, [(f"{k}={v!r} {path}", path, _with(path, {k: v}))
                        for k, vs in BAD_VALUES.items() for v in vs
                        for path in ("/generate", CHAT)]),
    "bad_long_prompt": (0.5, [(f"4x context {p}", p, partial(_long_prompt, p)) for p in PATHS]),
    "bad_stops": (0.5, [(f"{what} {p}", p, _with(p, {"stop": stop}))
                        for what, stop in STOPS.items() for p in ("/generate", CHAT)]),
    "bad_grammar": (1, [(f"{k} {spec}", "/generate", _with("/generate", {k: spec}))
                        for k, spec in BAD_GRAMMARS] + [
        ("response_format xml", CHAT, _with(CHAT, {"response_format": {"type": "xml"}})),
        ("response_format without schema", CHAT, _with(CHAT, {"response_format": {
            "type": "json_schema", "json_schema": {"name": "x"}}})),
    ]),
    "bad_body_9mb": (0.25, [(f"9 MB{' chunked' * c} {p}", p, partial(_big_body, c))
                            for c in (False, True) for p in PATHS]),
}  # fmt: skip


def _bad(kind: str, c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """One of `kind`'s variants; anything but a 4xx with a JSON error.message is an anomaly."""
    variant, path, body = rng.choice(BAD[kind][1])
    body = body(ctx) if callable(body) else body
    kw = {"json": body} if isinstance(body, dict) else {"content": body, "headers": JSON_HEADERS}
    try:
        r = c.post(path, **kw)
    except httpx.TransportError as e:
        return Outcome(None, False, variant, f"{type(e).__name__}: {e}")
    message = error_message(r)
    is_json = not message.startswith("(not a JSON error)")
    return Outcome(r.status_code, 400 <= r.status_code < 500 and is_json, variant, message)


# name -> (weight in the random mix, kind)
MALFORMED_KINDS: dict[str, tuple[float, Kind]] = {
    kind: (weight, partial(_bad, kind)) for kind, (weight, _) in BAD.items()
}
