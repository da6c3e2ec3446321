"""When a request stops: EOS, stop token ids, stop strings and regexes, max_new_tokens, context
length."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from radixrt.core import FinishKind, FinishReason, Req
from radixrt.core.text.decode_stream import DecodeStream
from radixrt.core.text.stop_matcher import StopMatcher
from radixrt.core.text.stops import BothStopMatcher, stop_matcher


@dataclass(slots=True)
class StopState:
    """A request's stop-string scan (`Req.stop_state`): where decoding of its output ids has
    got to, and the matcher fed the text decoded so far."""

    stream: DecodeStream
    matcher: StopMatcher | BothStopMatcher

    def scan(self, output_ids: list[int]) -> str | None:
        """The stop string (or regex match) that the new text of `output_ids` completes."""
        new = self.stream.step(output_ids)
        match = self.matcher.feed(new) if new else self.matcher.match
        return None if match is None else match.stop


class FinishChecker:
    """Sets `req.finish_reason` after each new token; stop strings and regexes match
    detokenized text (a regex's `matched` is the text it matched).

    Stop strings are matched incrementally: each check decodes only the new output ids (plus
    a few tokens of context) and feeds only the new text to the request's StopMatcher.
    """

    def __init__(self, eos_token_ids: list[int], decode: Callable[[list[int]], str]) -> None:
        self.eos_token_ids = list(eos_token_ids)
        self._eos = set(eos_token_ids)
        self.decode = decode  # token ids -> text, special tokens skipped

    def check(self, req: Req, context_len: int) -> None:
        """Finish `req` if its last output token ends it; a no-op once finished."""
        if req.is_finished or not req.output_ids:
            return
        p = req.sampling_params
        tok = req.output_ids[-1]
        # A constrained request only samples a stop token when its grammar is complete and,
        # before min_new_tokens, when nothing else is allowed: it ends there whatever
        # ignore_eos and min_new_tokens say. (A thinking budget alone does not constrain.)
        is_constrained = req.grammar is not None and req.grammar.constrains
        if tok in p.stop_token_ids or (tok in self._eos and (not p.ignore_eos or is_constrained)):
            if len(req.output_ids) >= p.min_new_tokens or is_constrained:
                req.finish(FinishReason(FinishKind.STOP, matched=tok))
                return
        if (p.stop or p.stop_regex) and (matched := self._match_stop_string(req)) is not None:
            req.finish(FinishReason(FinishKind.STOP, matched=matched))
            return
        if len(req.output_ids) >= p.max_new_tokens or req.seq_len >= context_len:
            req.finish(FinishReason(FinishKind.LENGTH))

    def _match_stop_string(self, req: Req) -> str | None:
        if req.stop_state is None:
            p = req.sampling_params
            req.stop_state = StopState(
                DecodeStream(self.decode), stop_matcher(p.stop, p.stop_regex)
            )
        return req.stop_state.scan(req.output_ids)
