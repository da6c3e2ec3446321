"""The soak's well-formed request kinds (run.py), and the nouns every kind shares: each sends one
request, reads what it must and says whether the answer was the expected one (a 2xx; the
`bad_*` kinds of malformed.py expect a 4xx with a JSON `error.message`). Anything else is an
anomaly."""

from __future__ import annotations

import json
import queue
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

TIMEOUT_S = 120.0  # a well-formed request still unanswered after this is an anomaly
SPEC_POOL = 24  # distinct grammar specs that recur; one spec in five is new instead
WORDS = ("the", "cat", "sat", "on", "a", "mat", "river", "blue", "seven", "house", "moon", "ran")
NAMES = ("name", "age", "city", "tag", "id", "score")
CHAT = "/v1/chat/completions"


@dataclass(slots=True)
class Outcome:
    """What one request came to; `expected` False is an anomaly. `note` is what the client saw
    (a finish reason, "gave up", "closed early") or, for the bad kinds, which variant ran."""

    status: int | None  # None: no HTTP status (connection error, client timeout)
    expected: bool
    note: str = ""
    message: str = ""  # the error message, when there was one


@dataclass
class SoakContext:
    """What the kinds share: the server's context length and the rids for the aborter thread
    as (rid, monotonic time at which to abort it)."""

    context_length: int
    aborts: queue.Queue[tuple[str, float]] = field(default_factory=queue.Queue)


Kind = Callable[[httpx.Client, random.Random, SoakContext], Outcome]


def abort_rid(client: httpx.Client, rid: str) -> Outcome:
    """POST /abort_request, which answers 200 whether or not `rid` still runs."""
    return _answer(client.post("/abort_request", json={"rid": rid}))


# ---- well-formed kinds -------------------------------------------------------------------


def generate(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    return _answer(c.post("/generate", json={"text": _prompt(rng), "sampling_params": _sp(rng)}))


def generate_stream(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    body = {"text": _prompt(rng), "sampling_params": _sp(rng), "stream": True}
    with c.stream("POST", "/generate", json=body) as r:
        return _read_stream(r)


def chat(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    return _answer(c.post(CHAT, json=_chat_body(rng)))


def chat_stream(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    body = _chat_body(rng, stream=True, stream_options={"include_usage": rng.random() < 0.5})
    with c.stream("POST", CHAT, json=body) as r:
        return _read_stream(r)


def parallel_n(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """`n` samples of one prompt, on /v1/completions or /generate; all n must come back."""
    n = rng.randint(2, 4)
    if rng.random() < 0.5:
        body = {"prompt": _prompt(rng), "n": n, "max_tokens": rng.randint(4, 48), "seed": 1}
        out = _answer(r := c.post("/v1/completions", json=body))
        got = len(r.json()["choices"]) if out.expected else n
    else:
        body = {"text": _prompt(rng), "sampling_params": {**_sp(rng), "n": n}}
        out = _answer(r := c.post("/generate", json=body))
        got = len(r.json()) if out.expected else n
    return out if got == n else Outcome(out.status, False, "n", f"{got} outputs for n={n}")


def regex(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    sp = {**_sp(rng), "regex": _spec(rng, _make_regex)}
    return _constrained(c.post("/generate", json={"text": _prompt(rng), "sampling_params": sp}))


def json_schema(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    sp = {**_sp(rng), "json_schema": _spec(rng, _make_schema)}
    return _constrained(c.post("/generate", json={"text": _prompt(rng), "sampling_params": sp}))


def response_format(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": _spec(rng, _make_schema)}}
    return _constrained(c.post(CHAT, json=_chat_body(rng, response_format=fmt)))


def abort(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """A request with a rid that the aborter thread aborts 0-80 ms after it is sent."""
    rid = f"soak-{uuid.uuid4().hex}"
    ctx.aborts.put((rid, time.monotonic() + rng.uniform(0.0, 0.08)))
    sp = {"max_new_tokens": 48, "ignore_eos": True, "temperature": 1.0}
    body = {"text": _prompt(rng), "rid": rid, "sampling_params": sp}
    if rng.random() < 0.5:
        return _answer(c.post("/generate", json=body))
    with c.stream("POST", "/generate", json={**body, "stream": True}) as r:
        return _read_stream(r)


def disconnect(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """A stream the client closes after 1-3 events (the connection goes with it)."""
    if rng.random() < 0.5:
        path = "/generate"
        body = {
            "text": _prompt(rng),
            "stream": True,
            "sampling_params": {"max_new_tokens": 48, "ignore_eos": True},
        }
    else:
        path, body = CHAT, _chat_body(rng, stream=True, max_tokens=48, ignore_eos=True)
    with c.stream("POST", path, json=body) as r:
        return _read_stream(r, max_events=rng.randint(1, 3))


def client_timeout(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """A non-streaming request whose client gives up after 10-100 ms."""
    sp = {"max_new_tokens": 48, "ignore_eos": True}
    try:
        r = c.post(
            "/generate",
            json={"text": _prompt(rng), "sampling_params": sp},
            timeout=rng.uniform(0.01, 0.1),
        )
    except httpx.TimeoutException:
        return Outcome(None, True, "gave up")
    return _answer(r)


# ---- helpers -------------------------------------------------------------------------------


def _prompt(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 24)))


def _sp(rng: random.Random) -> dict[str, Any]:
    return {
        "max_new_tokens": rng.randint(4, 48),
        "temperature": rng.choice((0.0, 0.7, 1.0)),
        "seed": rng.randrange(1000),
    }


def _chat_body(rng: random.Random, **extra: Any) -> dict[str, Any]:
    return {
        "model": "default",
        "messages": [{"role": "user", "content": _prompt(rng)}],
        "max_tokens": rng.randint(4, 48),
        "temperature": rng.choice((0.0, 1.0)),
        "seed": rng.randrange(1000),
        **extra,
    }


def _spec(rng: random.Random, make: Callable[[random.Random], Any]) -> Any:
    """One of SPEC_POOL specs (the compile cache sees repeats) or, one time in five, a new one."""
    seed = rng.getrandbits(48) if rng.random() < 0.2 else rng.randrange(SPEC_POOL)
    return make(random.Random(seed))


def _make_regex(rng: random.Random) -> str:
    shapes = (
        r"[a-z]{1,%d}",
        r"(yes|no|maybe)( [0-9]{1,%d})?",
        r"\d{1,%d}-[A-Z]{2}",
        r"(ab|cd){1,%d}!",
    )
    return f"{rng.choice(shapes) % rng.randint(1, 12)}(#{rng.randrange(10**6)})?"


def _make_schema(rng: random.Random) -> dict[str, Any]:
    types = (
        {"type": "integer", "minimum": 0, "maximum": 99},
        {"type": "boolean"},
        {"type": "string", "maxLength": rng.randint(1, 8)},
        {"enum": [f"v{rng.randrange(10**6)}", "x"]},
    )
    props = {k: rng.choice(types) for k in rng.sample(NAMES, rng.randint(1, 3))}
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _answer(r: httpx.Response) -> Outcome:
    if 200 <= r.status_code < 300:
        return Outcome(r.status_code, True, _finish_reason(r.json()))
    return Outcome(r.status_code, False, message=error_message(r))


def _constrained(r: httpx.Response) -> Outcome:
    """A constrained request's answer: a 400 that names the spec's shortest output is the
    expected refusal of a budget too small for any valid output."""
    if r.status_code == 400 and "the shortest output of the" in (message := error_message(r)):
        return Outcome(400, True, "budget below the minimum", message)
    return _answer(r)


def _read_stream(r: httpx.Response, max_events: int | None = None) -> Outcome:
    """Read SSE events to `[DONE]`, or close after `max_events`; an error event is an anomaly."""
    if r.status_code != 200:
        r.read()
        return Outcome(r.status_code, False, message=error_message(r))
    events, reason = 0, ""
    for data in _sse_data(r.iter_lines()):
        if data == "[DONE]":
            return Outcome(200, events > 0, reason, "" if events else "no event before [DONE]")
        event = json.loads(data)
        if "error" in event:
            return Outcome(200, False, "error event", str(event["error"].get("message")))
        events += 1
        reason = _finish_reason(event) or reason
        if max_events is not None and events >= max_events:
            return Outcome(200, True, "closed early")
    return Outcome(200, False, message="the stream ended before [DONE]")


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def _finish_reason(body: Any) -> str:
    """The first output's finish reason in a native or OpenAI body ("" while unfinished)."""
    first = body[0] if isinstance(body, list) and body else body
    if not isinstance(first, dict):
        return ""
    if "choices" in first:
        return str(first["choices"][0].get("finish_reason") or "") if first["choices"] else ""
    reason = (first.get("meta_info") or {}).get("finish_reason")
    return str(reason.get("type", "")) if isinstance(reason, dict) else str(reason or "")


def error_message(r: httpx.Response) -> str:
    try:
        return str(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"(not a JSON error) {r.text[:200]!r}"


# name -> (weight in the random mix, kind); kinds.py adds the other files' kinds
KINDS: dict[str, tuple[float, Kind]] = {
    "generate": (3, generate), "generate_stream": (3, generate_stream), "chat": (2, chat),
    "chat_stream": (2, chat_stream), "parallel_n": (2, parallel_n), "regex": (2, regex),
    "json_schema": (2, json_schema), "response_format": (1, response_format),
    "abort": (2, abort), "disconnect": (2, disconnect), "client_timeout": (2, client_timeout),
}  # fmt: skip
