"""Typed output deltas: what one request gained since its consumer last looked (new text, new
token ids and their logprobs, the finish), so a stream does work and sends bytes in proportion
to what is new, never to the output so far."""

from __future__ import annotations

from dataclasses import dataclass

from radixrt.core import FinishReason
from radixrt.core.messages import TopLogprobs
from radixrt.serve.results.detokenizer import IncrementalDetokenizer
from radixrt.serve.results.state import ReqOutput


@dataclass(frozen=True, slots=True)
class OutputDelta:
    """Output tokens [start, start + len(token_ids)) and text characters
    [text_start, text_start + len(text)) of one request; `finish_reason` is set on its last
    delta only. Logprob lists are empty unless the request asked for them (top: unless
    top_logprobs_num > 0)."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[TopLogprobs]
    start: int  # output tokens before this delta
    text_start: int  # characters of text before this delta
    finish_reason: FinishReason | None = None

    @property
    def end(self) -> int:
        """Output tokens so far, this delta's included (usage's completion tokens)."""
        return self.start + len(self.token_ids)

    @property
    def is_last(self) -> bool:
        return self.finish_reason is not None


class DeltaCursor:
    """How much of one request's output its consumer has taken, on the thread that applies
    the scheduler's outputs (the server's event loop). Each take reads the new ids only; the
    final text is decoded once, when the request has finished."""

    __slots__ = ("req", "detok", "num_tokens", "num_chars", "is_done")

    def __init__(self, req: ReqOutput, detok: IncrementalDetokenizer) -> None:
        self.req = req
        self.detok = detok
        self.num_tokens = 0  # output tokens handed out
        self.num_chars = 0  # text characters handed out
        self.is_done = False  # the last delta was handed out

    def take(self) -> OutputDelta | None:
        """Everything new (a delta per new token, even when its text is held back); None when
        nothing is."""
        return self._take(any_token=True)

    def take_text(self) -> OutputDelta | None:
        """What is new once there is new text or the request finished; tokens whose text is
        held back (half a character, a possible stop string) wait for the next delta."""
        return self._take(any_token=False)

    def _take(self, any_token: bool) -> OutputDelta | None:
        if self.is_done:
            return None
        req = self.req
        num = len(req.output_ids)
        reason = req.finish_reason
        if reason is not None:
            text = self.detok.finish(req.output_ids[:num], reason.matched)[self.num_chars :]
        else:
            end = self.detok.visible_len(req.output_ids)
            text = self.detok.text[self.num_chars : end]
            if not text and (num == self.num_tokens or not any_token):
                return None
        start, self.num_tokens = self.num_tokens, num
        text_start, self.num_chars = self.num_chars, self.num_chars + len(text)
        self.is_done = reason is not None
        return OutputDelta(
            text,
            req.output_ids[start:num],
            req.output_logprobs[start:num],
            req.output_top_logprobs[start:num],
            start,
            text_start,
            reason,
        )
