"""A batch as the runner keeps it: its lines, each line's result once known, its state and
times. Dialect-neutral: OpenAI's, Anthropic's and Gemini's routes render the same job their
own way.

Ownership: a job lives in the HTTP process (event loop only), in the runner's store under its
owner (tenant, "" without tenants), until deleted or pushed out past --max-stored-batches.
Its lines' calls belong to its creator: they are admitted, counted and cached as theirs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from radixrt.serve.http.api.gemini.protocol import format_time

# A line's outcome, in Anthropic's words (OpenAI's output file holds the succeeded ones, its
# error file the rest).
SUCCEEDED, ERRORED, CANCELED, EXPIRED = "succeeded", "errored", "canceled", "expired"
IN_PROGRESS, CANCELING, ENDED = "in_progress", "canceling", "ended"
EXPIRY_S = 24 * 3600.0  # lines not started this long after the batch was made expire
# What a line or a result costs beyond its bytes (its objects), counted against the bounds.
LINE_OVERHEAD = 256


def rfc3339(t: float | None) -> str | None:
    """A Unix time as Anthropic's and Gemini's batches give times (format_time, Gemini's
    caches' rule); None stays None."""
    return None if t is None else format_time(t)


class BatchNotFoundError(LookupError):
    """No batch or file with that id for this tenant: a 404 in the path's dialect."""


@dataclass(frozen=True, slots=True)
class BatchLine:
    custom_id: str
    path: str  # the route it is sent to, e.g. /v1/chat/completions
    body: bytes  # its JSON body


@dataclass(frozen=True, slots=True)
class LineResult:
    outcome: str  # SUCCEEDED, ERRORED, CANCELED or EXPIRED
    status: int  # the route's HTTP status; 0 when the line was never answered
    body: bytes  # the route's answer (JSON); b"" when never answered
    request_id: str


@dataclass(slots=True)
class Usage:
    """Tokens over the batch's answered lines (input counts cached tokens too)."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    def add(self, answer: Any) -> None:
        """Count an answer's usage: chat and completions (prompt_/completion_tokens) or
        Responses and Anthropic (input_/output_tokens; Anthropic's cache reads apart)."""
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if not isinstance(usage, dict):
            return
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
        read = usage.get("cache_read_input_tokens") or 0
        made = usage.get("cache_creation_input_tokens") or 0
        fresh = usage.get("prompt_tokens", usage.get("input_tokens", 0)) or 0
        self.input_tokens += int(fresh) + int(read) + int(made)
        self.cached_tokens += int(cached or 0) + int(read)
        self.output_tokens += int(
            usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0
        )


@dataclass(eq=False)
class BatchJob:
    """`held`: the bytes it holds, kept current (lines with their ids, results, and
    `extra_bytes` of dialect data such as Gemini's per-request metadata), each line and
    result counted with LINE_OVERHEAD; `tally`: lines per outcome, kept current."""

    id: str
    owner: str
    lines: list[BatchLine]
    info: dict[str, Any] = field(default_factory=dict)  # the dialect's own fields
    created_at: float = field(default_factory=time.time)
    expires_at: float = 0.0
    extra_bytes: int = 0
    status: str = IN_PROGRESS
    cancel_at: float | None = None
    ended_at: float | None = None
    results: list[LineResult | None] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    held: int = 0
    tally: dict[str, int] = field(default_factory=dict)
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # set: abort lines in flight
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.expires_at = self.expires_at or self.created_at + EXPIRY_S
        self.results = [None] * len(self.lines)
        self.held = self.extra_bytes + sum(_line_bytes(line) for line in self.lines)
        self.tally = {SUCCEEDED: 0, ERRORED: 0, CANCELED: 0, EXPIRED: 0}

    def record(self, index: int, result: LineResult) -> None:
        assert self.results[index] is None, "a line has one result"
        self.results[index] = result
        self.tally[result.outcome] += 1
        self.held += len(result.body) + LINE_OVERHEAD
        if result.outcome == SUCCEEDED:
            try:
                self.usage.add(msgspec.json.decode(result.body))
            except msgspec.DecodeError:
                pass

    def counts(self) -> dict[str, int]:
        """Lines per outcome, and `processing`: those without one yet."""
        return {**self.tally, "processing": len(self.lines) - sum(self.tally.values())}

    def shed(self, results: bool) -> None:
        """Once ended: drop the lines' bodies (their ids stay), and the results' bodies too
        when they have been written elsewhere (`results`)."""
        self.lines = [BatchLine(line.custom_id, line.path, b"") for line in self.lines]
        if results:
            self.results = [None if r is None else LineResult(r.outcome, r.status, b"",
                            r.request_id) for r in self.results]  # fmt: skip
        kept = sum(len(r.body) + LINE_OVERHEAD for r in self.results if r is not None)
        self.held = self.extra_bytes + sum(_line_bytes(line) for line in self.lines) + kept


def _line_bytes(line: BatchLine) -> int:
    return len(line.body) + len(line.custom_id) + LINE_OVERHEAD
