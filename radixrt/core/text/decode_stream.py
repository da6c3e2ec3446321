"""DecodeStream: the decode position in a growing list of token ids, so that each step decodes
only the new ids plus the few tokens of left context before them."""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"  # what a decoder yields for an incomplete UTF-8 sequence
# New ids still ending in half a character after this many tokens are taken as they are
# (invalid bytes, not a character still arriving: real text resolves within 2 or 3), so that
# a step's decode stays short.
MAX_PENDING_TOKENS = 16


class DecodeStream:
    """`step(ids)` returns the text that `ids[read_offset:]` adds, in complete characters.

    Invariant: the texts returned so far, joined, are the decoding of `ids[:read_offset]`.
    The new ids are decoded after `context` (the ids of the last step that added text) and
    the context's own decoding is cut off, so word-start spaces come out right (a tokenizer
    may drop the leading space of a decode); a tail that ends in half a character waits.
    A step decodes the new ids and the context only: O(new ids + context), never the output.
    """

    __slots__ = ("decode", "read_offset", "_context", "_context_text")

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode  # token ids -> text
        self.read_offset = 0  # ids before this are decoded and returned
        self._context: list[int] = []
        self._context_text: str | None = ""  # decode(_context), None until needed

    def step(self, ids: list[int]) -> str:
        """The new stable text of `ids` (a list that only ever grows); "" while none is."""
        if len(ids) <= self.read_offset:
            return ""
        new_ids = ids[self.read_offset :]
        if self._context_text is None:
            self._context_text = self.decode(self._context)
        prefix = self._context_text
        full = self.decode(self._context + new_ids)
        if full == prefix:  # ids that add no text (skipped special tokens): the context stays
            self.read_offset = len(ids)
            return ""
        is_broken = len(full) < len(prefix) or full.endswith(REPLACEMENT)
        if is_broken and len(new_ids) < MAX_PENDING_TOKENS:
            return ""  # half a character: wait for the rest
        self.read_offset = len(ids)
        if len(full) < len(prefix):
            return ""
        self._context, self._context_text = new_ids, None
        return full[len(prefix) :]
