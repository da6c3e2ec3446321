"""Incremental detokenization that never emits half a character or half a stop string."""

from __future__ import annotations

from typing import Any

_REPLACEMENT = "\ufffd"  # what a decoder yields for an incomplete UTF-8 sequence


class IncrementalDetokenizer:
    """Turns a growing list of output ids into a growing, stable text.

    `update(ids)` returns the text that is safe to show: complete characters only, and with
    any tail that could still become a stop string held back. `finish(ids, stop)` returns the
    final text, cut before the stop string that ended the request.
    """

    def __init__(
        self, tokenizer: Any, skip_special_tokens: bool = True, stop: list[str] | None = None
    ):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = list(stop or [])
        self.text = ""  # decoded text of ids[:read_offset]
        self._prefix_offset = 0
        self._read_offset = 0

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def update(self, ids: list[int]) -> str:
        """Consume the whole output so far; return the text safe to show."""
        if len(ids) > self._read_offset:
            # Decode with a few tokens of left context so word-start spaces come out right.
            prefix = self.decode(ids[self._prefix_offset : self._read_offset])
            full = self.decode(ids[self._prefix_offset :])
            if len(full) > len(prefix) and not full.endswith(_REPLACEMENT):
                self.text += full[len(prefix) :]
                self._prefix_offset = self._read_offset
                self._read_offset = len(ids)
        return self._visible(self.text)

    def finish(self, ids: list[int], matched_stop: str | None) -> str:
        """The final text: all of ids decoded, cut before `matched_stop` if that ended it."""
        text = self.decode(ids)
        if matched_stop:
            idx = text.find(matched_stop)
            if idx >= 0:
                text = text[:idx]
        return text

    def _visible(self, text: str) -> str:
        for s in self.stop:
            idx = text.find(s)
            if idx >= 0:
                text = text[:idx]
        hold = 0
        for s in self.stop:  # the longest text suffix that is a proper prefix of a stop string
            for n in range(min(len(s) - 1, len(text)), hold, -1):
                if text.endswith(s[:n]):
                    hold = n
                    break
        return text[: len(text) - hold]
