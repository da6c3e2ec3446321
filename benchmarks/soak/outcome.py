"""The nouns every soak kind shares (an Outcome, the SoakContext, a Kind) and how a reply becomes
an Outcome: a 2xx answer, a stream read to `[DONE]`, a constrained request's expected refusal.
Anything but the expected reply is an anomaly."""

from __future__ import annotations

import json
import queue
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

TIMEOUT_S = 120.0  # a well-formed request still unanswered after this is an anomaly


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
    return answer(client.post("/abort_request", json={"rid": rid}))


def answer(r: httpx.Response) -> Outcome:
    if 200 <= r.status_code < 300:
        return Outcome(r.status_code, True, finish_reason(r.json()))
    return Outcome(r.status_code, False, message=error_message(r))


def constrained(r: httpx.Response) -> Outcome:
    """A constrained request's answer: a 400 that names the spec's shortest output is the
    expected refusal of a budget too small for any valid output."""
    if r.status_code == 400 and "the shortest output of the" in (message := error_message(r)):
        return Outcome(400, True, "budget below the minimum", message)
    return answer(r)


def read_stream(r: httpx.Response, max_events: int | None = None) -> Outcome:
    """Read SSE events to `[DONE]`, or close after `max_events`; an error event is an anomaly."""
    if r.status_code != 200:
        r.read()
        return Outcome(r.status_code, False, message=error_message(r))
    events, reason = 0, ""
    for data in sse_data(r.iter_lines()):
        if data == "[DONE]":
            return Outcome(200, events > 0, reason, "" if events else "no event before [DONE]")
        event = json.loads(data)
        if "error" in event:
            return Outcome(200, False, "error event", str(event["error"].get("message")))
        events += 1
        reason = finish_reason(event) or reason
        if max_events is not None and events >= max_events:
            return Outcome(200, True, "closed early")
    return Outcome(200, False, message="the stream ended before [DONE]")


def sse_data(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def finish_reason(body: Any) -> str:
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
