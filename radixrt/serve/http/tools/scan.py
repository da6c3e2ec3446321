"""Where a JSON value ends in text that arrives in pieces: an incremental scanner that keeps
its place, so a call streamed token by token is read once, not once per token."""

from __future__ import annotations

_CLOSE = {"{": "}", "[": "]"}


class JsonScan:
    """Finds the end of the JSON value (object, array or string) starting at or after
    `start` (leading whitespace skipped) in a text that only grows. Scalars other than
    strings are not values it can end: `is_bad` turns True."""

    __slots__ = ("pos", "stack", "in_string", "escaped", "started", "is_bad", "end")

    def __init__(self, start: int = 0) -> None:
        self.pos = start  # the next character to read
        self.stack: list[str] = []  # closers still expected
        self.in_string = False
        self.escaped = False
        self.started = False
        self.is_bad = False
        self.end: int | None = None  # once found, kept

    def scan(self, text: str) -> int | None:
        """The index just past the value's end, or None while it is incomplete (or bad)."""
        if self.end is not None:
            return self.end
        i, n = self.pos, len(text)
        while i < n and not self.is_bad:
            c = text[i]
            i += 1
            if not self.started:
                if c.isspace():
                    continue
                self.started = True
                if c == '"':
                    self.in_string = True
                elif c in _CLOSE:
                    self.stack.append(_CLOSE[c])
                else:
                    self.is_bad = True
                continue
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
                    if not self.stack:
                        self.pos = self.end = i
                        return i
                continue
            if c == '"':
                self.in_string = True
            elif c in _CLOSE:
                self.stack.append(_CLOSE[c])
            elif c in "]}":
                if not self.stack or self.stack.pop() != c:
                    self.is_bad = True
                elif not self.stack:
                    self.pos = self.end = i
                    return i
        self.pos = i
        return None
