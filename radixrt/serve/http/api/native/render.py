"""/generate's answers: a result `{text, output_ids, meta_info}` per request (the Engine's
shape), whole or as server-sent events.

A stream's event for request i holds its whole `text` so far, but only what is new since its
previous event in `output_ids`, `meta_info.output_token_logprobs` and
`meta_info.output_top_logprobs` (the prompt's logprobs come in its last event), so a stream
sends bytes in proportion to its tokens; the counts in `meta_info` are totals. With several
requests each event names its request (`index`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.results.result import input_logprob_meta, output_logprob_meta, result_meta
from radixrt.serve.web.responses import SSE_DONE, error_body, sse_event


class GenerateRender(BaseRender):
    every_token = True  # an event per token: clients count them

    def __init__(self, is_single: bool, token_text: Callable[[int], str] | None = None) -> None:
        self.is_single = is_single  # one prompt given bare: one object, not a list
        self.token_text = token_text  # return_text_in_logprobs: a token id's own text
        self._texts: list[str] = []  # each request's text sent so far
        self._is_many = False

    def response(self, done: Finished) -> Any:
        results = [
            result_of(s, d, d.text, self.token_text)
            for s, d in zip(done.states, done.outputs, strict=True)
        ]
        if done.explained is not None:
            for state, result in zip(done.states, results, strict=True):
                explained = done.explained[tuple(state.out.input_ids)]
                result["meta_info"]["cache_explanation"] = explained
        return results[0] if self.is_single and len(results) == 1 else results

    def head(self, states: list[ReqState]) -> tuple[bytes, ...]:
        self._texts = [""] * len(states)
        self._is_many = len(states) > 1
        return ()

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        self._texts[index] += delta.text
        event = result_of(state, delta, self._texts[index], self.token_text)
        if self._is_many:
            event["index"] = index
        yield sse_event(event)

    def error(self, message: str, status: int) -> bytes:
        return sse_event(error_body(message, status))

    def close(self) -> tuple[bytes, ...]:
        return (SSE_DONE,)


def result_of(
    state: ReqState, delta: OutputDelta, text: str, token_text: Callable[[int], str] | None = None
) -> dict[str, Any]:
    """The result of `state` with `text`, the tokens of `delta` and their logprobs (with each
    token's text when `token_text` is given)."""
    req = state.out
    meta = result_meta(req, delta.end)
    meta["id"] = state.visible_id
    if req.sampling_params.return_logprob:
        meta.update(output_logprob_meta(req, delta.token_ids, delta.logprobs, delta.top_logprobs))
        if delta.is_last:
            meta.update(input_logprob_meta(req))
        if token_text is not None:
            with_token_text(meta, token_text)
    return {"text": text, "output_ids": delta.token_ids, "meta_info": meta}


def with_token_text(meta: dict[str, Any], token_text: Callable[[int], str]) -> None:
    """Fill the text slot of every (logprob, token id, text) entry in `meta`."""
    for key in ("output_token_logprobs", "input_token_logprobs"):
        if key in meta:
            meta[key] = [(lp, t, token_text(t)) for lp, t, _ in meta[key]]
    for key in ("output_top_logprobs", "input_top_logprobs"):
        if key in meta:
            meta[key] = [
                None if top is None else [(lp, t, token_text(t)) for lp, t, _ in top]
                for top in meta[key]
            ]
