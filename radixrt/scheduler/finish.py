"""When a request stops: EOS, stop token ids, stop strings, max_new_tokens, context length."""

from __future__ import annotations

from collections.abc import Callable

from radixrt.core import FinishKind, FinishReason, Req


class FinishChecker:
    """Sets `req.finish_reason` after each new token; stop strings match detokenized text."""

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
        if tok in p.stop_token_ids or (not p.ignore_eos and tok in self._eos):
            if len(req.output_ids) >= p.min_new_tokens:
                req.finish(FinishReason(FinishKind.STOP, matched=tok))
                return
        if p.stop and (matched := self._match_stop_string(req)) is not None:
            req.finish(FinishReason(FinishKind.STOP, matched=matched))
            return
        if len(req.output_ids) >= p.max_new_tokens or req.seq_len >= context_len:
            req.finish(FinishReason(FinishKind.LENGTH))

    def _match_stop_string(self, req: Req) -> str | None:
        text = self.decode(req.output_ids)
        longest = max(len(s) for s in req.sampling_params.stop)
        # Only text that is new since the last check (plus overlap for a stop string that
        # straddles the boundary) can hold a new match.
        start = max(0, req.stop_scan_offset - longest + 1)
        req.stop_scan_offset = len(text)
        window = text[start:]
        hits = [(window.find(s), s) for s in req.sampling_params.stop if s in window]
        return min(hits)[1] if hits else None


def truncate_at_stop(text: str, req: Req) -> str:
    """Cut `text` before the first occurrence of the stop string that finished `req`."""
    reason = req.finish_reason
    if reason is None or not isinstance(reason.matched, str):
        return text
    idx = text.find(reason.matched)
    return text if idx < 0 else text[:idx]
