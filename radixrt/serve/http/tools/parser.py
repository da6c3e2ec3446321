"""Tool calls found in a model's output as it streams: text, the start of each call (its id
and name) and the pieces of its arguments, such that the pieces of a call concatenate to
exactly its arguments and feeding the output in any split gives the same calls.

Forced calls (the grammar guarantees their shape) stream their arguments as they come. In
`auto`, a call is held until its JSON is complete, then given whole when it names a known
tool with object arguments, or given back as text when it does not.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from radixrt.serve.http.tools.formats import CallFormat
from radixrt.serve.http.tools.scan import JsonScan
from radixrt.serve.http.tools.spec import ToolCall

# A call's head in the forced layout: the name, then the arguments' key.
_HEAD = re.compile(
    r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)'
)
_SEPARATORS = ",;"


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str


@dataclass(frozen=True, slots=True)
class CallStart:
    index: int  # calls of this output, from 0
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ArgsPiece:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningPiece:
    """Text of the model's reasoning (tools/reasoning.py), apart from its answer."""

    text: str


ToolEvent = TextPiece | CallStart | ArgsPiece | ReasoningPiece


class OutputParser(Protocol):
    """Reads one output as it streams: the events of each piece, and the calls found."""

    calls: list[ToolCall]

    def feed(self, text: str) -> list[ToolEvent]: ...

    def finish(self) -> list[ToolEvent]: ...


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(slots=True)
class _Call:
    """The call being read; its text is the parser's buffer from 0."""

    whole: JsonScan = field(default_factory=JsonScan)
    args: JsonScan | None = None  # set once the head is read
    args_start: int = 0
    args_sent: int = 0  # characters of the buffer given out as arguments
    started: bool = False  # CallStart given (streamed calls)
    id: str = ""
    name: str = ""


class ToolCallParser:
    """One output's calls. `names`: the tools a call may name; `forced`: the output is calls
    only, from its first character (a forced call's grammar)."""

    def __init__(
        self,
        fmt: CallFormat,
        names: set[str],
        forced: bool,
        new_id: Callable[[], str] = new_call_id,
    ) -> None:
        self.fmt = fmt
        self.names = names
        self.is_streamed = forced  # arguments given as they come
        self.new_id = new_id
        self.calls: list[ToolCall] = []
        self.buf = ""
        self.region_text = ""  # what opened the current region, given back if it holds no call
        self.call: _Call | None = None
        self.held_space = ""  # whitespace after a call, dropped unless text follows
        opener_in_grammar = fmt.opener is not None and fmt.opener in fmt.forced_prefix
        if fmt.opener is None:
            self.state = "start"
        elif forced and not opener_in_grammar:
            self.state = "region"
        else:
            self.state = "text"
        self.is_open = False  # an array format's '[' was read

    def feed(self, text: str) -> list[ToolEvent]:
        self.buf += text
        return self._run(final=False)

    def finish(self) -> list[ToolEvent]:
        """The rest, once the output is complete (a partial opener is text again)."""
        events = self._run(final=True)
        call = self.call
        if call is not None and call.started:  # cut short: its arguments so far
            events += self._args_piece(call, len(self.buf))
            self._record(call, self.buf[call.args_start : len(self.buf)])
        elif self.buf or self.region_text:
            events += self._as_text(self.region_text + self.buf)
        self.buf, self.call, self.region_text = "", None, ""
        return events

    def _run(self, final: bool) -> list[ToolEvent]:
        events: list[ToolEvent] = []
        while True:
            step = getattr(self, "_" + self.state)(final, events)
            if not step:
                return events

    # One step per state: True when it made progress (call again), False when it needs more.

    def _start(self, final: bool, events: list[ToolEvent]) -> bool:
        """Formats whose calls open the output: a lead token or `{` opens the region."""
        body = self.buf.lstrip()
        lead = self.fmt.lead or ""
        if not final and (not body or (lead and lead.startswith(body))):
            return False
        space = self.buf[: len(self.buf) - len(body)]
        if lead and body.startswith(lead):
            self.region_text, self.buf = space + lead, body[len(lead) :]
            self.state = "region"
        elif body.startswith("{"):
            self.region_text, self.buf = space, body
            self.state = "region"
        else:
            self.state = "plain"
        return True

    def _plain(self, final: bool, events: list[ToolEvent]) -> bool:
        if self.buf:
            events += self._as_text(self.buf)
            self.buf = ""
        return False

    def _as_text(self, text: str) -> list[ToolEvent]:
        if not text:
            return []
        if self.calls and not text.strip():
            self.held_space += text
            return []
        text, self.held_space = self.held_space + text, ""
        return [TextPiece(text)]

    def _text(self, final: bool, events: list[ToolEvent]) -> bool:
        opener = self.fmt.opener or ""
        i = self.buf.find(opener)
        if i >= 0:
            events += self._as_text(self.buf[:i])
            self.region_text, self.buf = opener, self.buf[i + len(opener) :]
            self.state = "region"
            return True
        keep = 0 if final else _partial_suffix(self.buf, opener)
        events += self._as_text(self.buf[: len(self.buf) - keep])
        self.buf = self.buf[len(self.buf) - keep :]
        return False

    def _region(self, final: bool, events: list[ToolEvent]) -> bool:
        if self.call is not None:
            return self._read_call(events)
        body = self.buf.lstrip()
        skipped = self.buf[: len(self.buf) - len(body)]
        if not body:
            return False
        closer = self.fmt.closer
        if self.fmt.array and not self.is_open:
            if body[0] != "[":
                return self._leave(events)
            self.is_open, self.region_text = True, self.region_text + skipped + "["
            self.buf = body[1:]
            return True
        if body[0] == "{":
            self.region_text += skipped
            self.buf, self.call = body, _Call()
            return True
        if body[0] in _SEPARATORS and self.calls:
            self.buf = body[1:]
            return True
        if self.fmt.array and body[0] == "]":
            self.buf, self.is_open = body[1:], False
            return self._close(events)
        if closer is not None and body.startswith(closer):
            self.buf = body[len(closer) :]
            return self._close(events)
        if closer is not None and closer.startswith(body) and not final:
            return False
        return self._leave(events)

    def _read_call(self, events: list[ToolEvent]) -> bool:
        call = self.call
        assert call is not None
        if call.args is None and (m := _HEAD.match(self.buf)) is not None:
            name = _json_string(m.group(1))
            call.args, call.args_start = JsonScan(m.end()), m.end()
            call.args_sent = m.end()
            if self.is_streamed and name in self.names:
                call.started, call.id, call.name = True, self.new_id(), name
                events.append(CallStart(len(self.calls), call.id, name))
        if call.started and call.args is not None:
            end = call.args.scan(self.buf)
            events += self._args_piece(call, len(self.buf) if end is None else end)
        end = call.whole.scan(self.buf)
        if end is None:
            if call.whole.is_bad:
                return self._leave(events)
            return False
        body, self.buf, self.call = self.buf[:end], self.buf[end:], None
        if call.started:
            args_end = call.args.pos if call.args is not None else end
            self._record(call, body[call.args_start : args_end])
            self.region_text = ""
            return True
        found = self._whole_call(body)
        if found is None:  # not a call of ours: the region is text
            self.buf = body + self.buf
            return self._leave(events)
        name, args = found
        call_id = self.new_id()
        events += [CallStart(len(self.calls), call_id, name), ArgsPiece(len(self.calls), args)]
        self.calls.append(ToolCall(call_id, name, args))
        self.region_text = ""
        return True

    def _whole_call(self, body: str) -> tuple[str, str] | None:
        """A complete call object's name and arguments text, when it is a call of a known
        tool with object arguments (as written when the head is in the usual layout)."""
        try:
            value = json.loads(body)
        except ValueError:
            return None
        if not isinstance(value, dict) or value.get("name") not in self.names:
            return None
        key = "arguments" if "arguments" in value else "parameters"
        args = value.get(key, {})
        if isinstance(args, str):  # arguments given as a JSON string
            try:
                return (value["name"], args) if isinstance(json.loads(args), dict) else None
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        if (m := _HEAD.match(body)) is not None:
            scan = JsonScan(m.end())
            end = scan.scan(body)
            if end is not None:
                return value["name"], body[m.end() : end]
        return value["name"], json.dumps(args, ensure_ascii=False)

    def _args_piece(self, call: _Call, end: int) -> list[ToolEvent]:
        if end <= call.args_sent:
            return []
        piece = self.buf[call.args_sent : end]
        call.args_sent = end
        return [ArgsPiece(len(self.calls), piece)]

    def _record(self, call: _Call, args: str) -> None:
        self.calls.append(ToolCall(call.id, call.name, args))

    def _close(self, events: list[ToolEvent]) -> bool:
        self.region_text = ""
        self.state = "text" if self.fmt.opener is not None else "plain"
        return True

    def _leave(self, events: list[ToolEvent]) -> bool:
        """What the region holds is not calls: its opener is text, and the rest is read as
        text (where a later opener may start calls again; never for formats whose calls
        open the output)."""
        self.call, self.is_open = None, False
        if self.fmt.opener is None:
            events += self._as_text(self.region_text + self.buf)
            self.region_text, self.buf, self.state = "", "", "plain"
            return False
        events += self._as_text(self.region_text)
        self.region_text, self.state = "", "text"
        return True


def _partial_suffix(text: str, opener: str) -> int:
    """The length of the longest end of `text` that begins `opener`."""
    for n in range(min(len(opener) - 1, len(text)), 0, -1):
        if opener.startswith(text[-n:]):
            return n
    return 0


def _json_string(inner: str) -> str:
    try:
        return str(json.loads(f'"{inner}"'))
    except ValueError:
        return inner
