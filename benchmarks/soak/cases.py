"""The soak's well-formed request kinds (run.py): each sends one request, reads what it must and
says whether the answer was the expected one, a 2xx (the `bad_*` kinds of malformed.py expect a
4xx with a JSON `error.message`), through outcome.py's readers."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from benchmarks.soak.outcome import (
    CHAT,
    Kind,
    Outcome,
    SoakContext,
    answer,
    constrained,
    read_stream,
)

SPEC_POOL = 24  # distinct grammar specs that recur; one spec in five is new instead
WORDS = ("the", "cat", "sat", "on", "a", "mat", "river", "blue", "seven", "house", "moon", "ran")
NAMES = ("name", "age", "city", "tag", "id", "score")


# ---- well-formed kinds -------------------------------------------------------------------


def generate(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    return answer(c.post("/generate", json={"text": _prompt(rng), "sampling_params": _sp(rng)}))


def generate_stream(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    body = {"text": _prompt(rng), "sampling_params": _sp(rng), "stream": True}
    with c.stream("POST", "/generate", json=body) as r:
        return read_stream(r)


def chat(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    return answer(c.post(CHAT, json=_chat_body(rng)))


def chat_stream(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    body = _chat_body(rng, stream=True, stream_options={"include_usage": rng.random() < 0.5})
    with c.stream("POST", CHAT, json=body) as r:
        return read_stream(r)


def parallel_n(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """`n` samples of one prompt, on /v1/completions or /generate; all n must come back."""
    n = rng.randint(2, 4)
    if rng.random() < 0.5:
        body = {"prompt": _prompt(rng), "n": n, "max_tokens": rng.randint(4, 48), "seed": 1}
        out = answer(r := c.post("/v1/completions", json=body))
        got = len(r.json()["choices"]) if out.expected else n
    else:
        body = {"text": _prompt(rng), "sampling_params": {**_sp(rng), "n": n}}
        out = answer(r := c.post("/generate", json=body))
        got = len(r.json()) if out.expected else n
    return out if got == n else Outcome(out.status, False, "n", f"{got} outputs for n={n}")


def regex(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    sp = {**_sp(rng), "regex": _spec(rng, _make_regex)}
    return constrained(c.post("/generate", json={"text": _prompt(rng), "sampling_params": sp}))


def json_schema(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    sp = {**_sp(rng), "json_schema": _spec(rng, _make_schema)}
    return constrained(c.post("/generate", json={"text": _prompt(rng), "sampling_params": sp}))


def response_format(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": _spec(rng, _make_schema)}}
    return constrained(c.post(CHAT, json=_chat_body(rng, response_format=fmt)))


def abort(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """A request with a rid that the aborter thread aborts 0-80 ms after it is sent."""
    rid = f"soak-{uuid.uuid4().hex}"
    ctx.aborts.put((rid, time.monotonic() + rng.uniform(0.0, 0.08)))
    sp = {"max_new_tokens": 48, "ignore_eos": True, "temperature": 1.0}
    body = {"text": _prompt(rng), "rid": rid, "sampling_params": sp}
    if rng.random() < 0.5:
        return answer(c.post("/generate", json=body))
    with c.stream("POST", "/generate", json={**body, "stream": True}) as r:
        return read_stream(r)


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
        return read_stream(r, max_events=rng.randint(1, 3))


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
    return answer(r)


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


# name -> (weight in the random mix, kind); kinds.py adds the other files' kinds
KINDS: dict[str, tuple[float, Kind]] = {
    "generate": (3, generate), "generate_stream": (3, generate_stream), "chat": (2, chat),
    "chat_stream": (2, chat_stream), "parallel_n": (2, parallel_n), "regex": (2, regex),
    "json_schema": (2, json_schema), "response_format": (1, response_format),
    "abort": (2, abort), "disconnect": (2, disconnect), "client_timeout": (2, client_timeout),
}  # fmt: skip
