"""A response's output items as its text is read: a reasoning item while the model reasons
(where the server reads reasoning: --reasoning-parser), a message item while it writes text, a
function_call item per call (arguments streamed as pieces that concatenate to the call's
arguments), each done before the next is added. The same reading makes the items of a
whole response and the events of a stream, so the two agree."""

from __future__ import annotations

import uuid
from typing import Any

from radixrt.serve.http.tools import (
    ArgsPiece,
    CallStart,
    OutputParser,
    ReasoningPiece,
    TextPiece,
    ToolEvent,
)

Event = dict[str, Any]  # a stream event without its sequence_number


class OutputItems:
    """One output's items (`items`, in order) and the events that build them. `parser`: the
    plan's parser of this output; `has_item`: an output with neither text nor calls still
    answers an empty message (False: a prewarm, which answers no item)."""

    def __init__(self, parser: OutputParser, has_item: bool) -> None:
        self.parser = parser
        self.has_item = has_item
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the last item, while it is written
        self._text: list[str] = []  # the open message's (or reasoning's) text so far

    @property
    def text(self) -> str:
        """The text of every message item (what a stored turn says besides its calls)."""
        return "".join(
            part["text"]
            for item in self.items
            if item["type"] == "message"
            for part in item["content"]
        ) + "".join(self._text)

    def feed(self, text: str) -> list[Event]:
        return self._read(self.parser.feed(text))

    def finish(self, cut: bool) -> list[Event]:
        """The rest, once the output is complete; `cut`: it ended at max_output_tokens (the
        last item is incomplete)."""
        events = self._read(self.parser.finish())
        if not any(i["type"] != "reasoning" for i in self.items) and self.has_item:
            events += self._add_message()  # (an answer of reasoning alone: an empty message)
        if self._open is not None:
            events += self._done("incomplete" if cut else "completed")
        return events

    def _read(self, found: list[ToolEvent]) -> list[Event]:
        events: list[Event] = []
        for e in found:
            if isinstance(e, ReasoningPiece):
                if self._open is None or self._open["type"] != "reasoning":
                    events += self._add({"id": "rs_" + uuid.uuid4().hex, "type": "reasoning",
                                         "summary": [], "content": [],
                                         "status": "in_progress"})  # fmt: skip
                self._text.append(e.text)
                events.append({"type": "response.reasoning_text.delta", **self._where(),
                               "content_index": 0, "delta": e.text})  # fmt: skip
            elif isinstance(e, TextPiece):
                if self._open is None or self._open["type"] != "message":
                    events += self._add_message()
                self._text.append(e.text)
                events.append({"type": "response.output_text.delta", **self._where(),
                               "content_index": 0, "delta": e.text, "logprobs": []})  # fmt: skip
            elif isinstance(e, CallStart):
                item = {"id": "fc_" + uuid.uuid4().hex, "type": "function_call",
                        "status": "in_progress", "arguments": "", "call_id": e.id,
                        "name": e.name}  # fmt: skip
                events += self._add(item)
            else:
                assert isinstance(e, ArgsPiece) and self._open is not None
                self._open["arguments"] += e.text
                events.append({"type": "response.function_call_arguments.delta",
                               **self._where(), "delta": e.text})  # fmt: skip
        return events

    def _add_message(self) -> list[Event]:
        item = {"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}  # fmt: skip
        events = self._add(item)
        events.append({"type": "response.content_part.added", **self._where(),
                       "content_index": 0, "part": _part("")})  # fmt: skip
        return events

    def _add(self, item: dict[str, Any]) -> list[Event]:
        """`item` becomes the open item (the one before it done)."""
        events = self._done("completed") if self._open is not None else []
        self.items.append(item)
        self._open = item
        return [*events, {"type": "response.output_item.added",
                          "output_index": len(self.items) - 1, "item": dict(item)}]  # fmt: skip

    def _done(self, status: str) -> list[Event]:
        item, where = self._open, self._where()
        assert item is not None
        self._open = None
        item["status"] = status
        if item["type"] == "message":
            text, self._text = "".join(self._text), []
            item["content"] = [_part(text)]
            events = [
                {"type": "response.output_text.done", **where, "content_index": 0,
                 "text": text, "logprobs": []},
                {"type": "response.content_part.done", **where, "content_index": 0,
                 "part": _part(text)},
            ]  # fmt: skip
        elif item["type"] == "reasoning":
            text, self._text = "".join(self._text), []
            item["content"] = [{"type": "reasoning_text", "text": text}]
            events = [{"type": "response.reasoning_text.done", **where, "content_index": 0,
                       "text": text}]  # fmt: skip
        else:
            events = [{"type": "response.function_call_arguments.done", **where,
                       "name": item["name"], "arguments": item["arguments"]}]  # fmt: skip
        events.append({"type": "response.output_item.done", "output_index": where["output_index"],
                       "item": dict(item)})  # fmt: skip
        return events

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.items) - 1}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
