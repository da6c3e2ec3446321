"""A streamed message's content blocks when its output is read (tools, reasoning): a thinking
block while the model reasons (thinking asked for), a text block while it writes text, a
tool_use block per call (its input streamed as input_json_delta pieces that concatenate to the
call's JSON), each stopped before the next starts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import msgspec

from radixrt.serve.http.tools import (
    ArgsPiece,
    CallStart,
    OutputParser,
    ReasoningPiece,
    TextPiece,
    ToolEvent,
)

_encoder = msgspec.json.Encoder()


def named_event(name: str, obj: Any) -> bytes:
    """One SSE event with a name (the anthropic client ignores events without one)."""
    return b"event: " + name.encode() + b"\ndata: " + _encoder.encode(obj) + b"\n\n"


def new_tool_use_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


def tool_use_block(call_id: str, name: str, value: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}


def thinking_block(thinking: str) -> dict[str, Any]:
    """A thinking block: the model's reasoning as its reasoning parser read it, unsigned (the
    signature is Anthropic's own; given back, the block is taken and not shown)."""
    return {"type": "thinking", "thinking": thinking, "signature": ""}


class ToolBlocks:
    """The blocks of one stream; `index` counts the blocks started."""

    def __init__(self, parser: OutputParser) -> None:
        self.parser = parser
        self.index = -1
        self.open_kind: str | None = None  # "thinking", "text" or "tool_use" while one is open

    def feed(self, text: str, is_last: bool) -> Iterator[bytes]:
        events = self.parser.feed(text)
        if is_last:
            events += self.parser.finish()
        for e in events:
            yield from self._event(e)

    def close(self) -> Iterator[bytes]:
        if self.open_kind is not None:
            yield _stop(self.index)
            self.open_kind = None

    def _event(self, e: ToolEvent) -> Iterator[bytes]:
        if isinstance(e, ReasoningPiece):
            if self.open_kind != "thinking":
                yield from self._start(thinking_block(""), "thinking")
            piece = {"type": "thinking_delta", "thinking": e.text}
        elif isinstance(e, TextPiece):
            if self.open_kind != "text":
                yield from self._start({"type": "text", "text": ""}, "text")
            piece = {"type": "text_delta", "text": e.text}
        elif isinstance(e, CallStart):
            yield from self._start(tool_use_block(e.id, e.name, {}), "tool_use")
            return
        else:
            assert isinstance(e, ArgsPiece)
            piece = {"type": "input_json_delta", "partial_json": e.text}
        yield named_event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.index, "delta": piece},
        )

    def _start(self, block: dict[str, Any], kind: str) -> Iterator[bytes]:
        yield from self.close()
        self.index += 1
        self.open_kind = kind
        yield named_event(
            "content_block_start",
            {"type": "content_block_start", "index": self.index, "content_block": block},
        )


def _stop(index: int) -> bytes:
    return named_event("content_block_stop", {"type": "content_block_stop", "index": index})
