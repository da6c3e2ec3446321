"""Incremental detokenization that never emits half a character or half a stop string."""

from __future__ import annotations

from typing import Any

from radixrt.text.decode_stream import DecodeStream
from radixrt.text.stop_matcher import StopMatcher


class IncrementalDetokenizer:
    """Turns a growing list of output ids into a growing, stable text.

    `update(ids)` returns the text that is safe to show: complete characters only, cut before
    the first stop string, and with any tail that could still become a stop string held back.
    `finish(ids, stop)` returns the final text, cut before the stop string that ended the
    request. Each update decodes and matches only the new ids (plus a few of context).
    """

    def __init__(
        self, tokenizer: Any, skip_special_tokens: bool = True, stop: list[str] | None = None
    ):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = list(stop or [])
        self.text = ""  # decoded text of ids[:read_offset] of the stream
        self._stream = DecodeStream(self.decode)
        self._matcher = StopMatcher(self.stop)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def update(self, ids: list[int]) -> str:
        """Consume the whole output so far; return the text safe to show."""
        end = self.visible_len(ids)  # grows `text` first
        return self.text[:end]

    def visible_len(self, ids: list[int]) -> int:
        """Consume the whole output so far; return how many characters of `text` are safe to
        show (a stream slices only its new ones: O(new ids), not O(output))."""
        new = self._stream.step(ids)
        if new:
            self.text += new
            self._matcher.feed(new)
        match = self._matcher.match
        if match is not None:
            return match.start
        return len(self.text) - self._matcher.hold_len

    def finish(self, ids: list[int], matched_stop: str | None) -> str:
        """The final text: all of ids decoded, cut before `matched_stop` if that ended it."""
        text = self.decode(ids)
        if matched_stop:
            idx = text.find(matched_stop)
            if idx >= 0:
                text = text[:idx]
        return text
