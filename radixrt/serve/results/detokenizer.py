"""Incremental detokenization that never emits half a character or half a stop string."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from radixrt.core.text.decode_stream import DecodeStream
from radixrt.core.text.stops import stop_matcher

if TYPE_CHECKING:
    from radixrt.core import SamplingParams


class IncrementalDetokenizer:
    """Turns a growing list of output ids into a growing, stable text.

    `update(ids)` returns the text that is safe to show: complete characters only, cut before
    the first stop string, and with any tail that could still become a stop string held back.
    `finish(ids, stop)` returns the final text, cut before the stop string (or the text a stop
    regex matched) that ended the request. Each update decodes and matches only the new ids
    (plus a few of context). With `no_stop_trim` nothing is held back, and the final text
    keeps the stop string (or regex match) and ends with it: characters the token that
    completed it brought after it are cut, as vLLM's include_stop_str_in_output does.
    """

    def __init__(
        self,
        tokenizer: Any,
        skip_special_tokens: bool = True,
        stop: list[str] | None = None,
        stop_regex: list[str] | None = None,
        no_stop_trim: bool = False,
        spaces_between_special_tokens: bool = True,
    ):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = list(stop or [])
        self.no_stop_trim = no_stop_trim
        # Passed only when off: the decode of a tokenizer that has no such option is unchanged.
        self._decode_args = {"skip_special_tokens": skip_special_tokens}
        if not spaces_between_special_tokens:
            self._decode_args["spaces_between_special_tokens"] = False
        self.text = ""  # decoded text of ids[:read_offset] of the stream
        self._stream = DecodeStream(self.decode)
        self._matcher = stop_matcher(self.stop, stop_regex or [])

    @classmethod
    def for_params(cls, tokenizer: Any, p: SamplingParams) -> IncrementalDetokenizer:
        """The detokenizer of a request sampled with `p`."""
        return cls(tokenizer, p.skip_special_tokens, p.stop, p.stop_regex, p.no_stop_trim,
                   p.spaces_between_special_tokens)  # fmt: skip

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, **self._decode_args)

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
            if not self.no_stop_trim:
                self._matcher.feed(new)
        match = self._matcher.match
        if match is not None:
            return match.start
        return len(self.text) - self._matcher.hold_len

    def finish(self, ids: list[int], matched_stop: str | int | None) -> str:
        """The final text: all of ids decoded, cut before `matched_stop` if that ended it
        (after it with no_stop_trim): a stop string, or a stop token (EOS or one of
        stop_token_ids: the last id), whose text is left out as vLLM and SGLang leave it
        out (it shows only where special tokens are kept in the text, or the token is not
        special). A stop string was completed by the last token, so its match ends in that
        token's text and is looked for there: with special tokens shown, an earlier
        occurrence (inside a special token's name) is not the one that stopped."""
        if isinstance(matched_stop, int):
            if ids and ids[-1] == matched_stop and not self.no_stop_trim:
                ids = ids[:-1]
            matched_stop = None
        text = self.decode(ids)
        if matched_stop:
            last = len(self.decode(ids[-1:]))  # about the last token's characters
            idx = text.find(matched_stop, max(0, len(text) - last - len(matched_stop)))
            if idx < 0:  # a tokenizer whose texts do not add up: the first occurrence
                idx = text.find(matched_stop)
            if idx >= 0:
                text = text[: idx + len(matched_stop)] if self.no_stop_trim else text[:idx]
        return text
