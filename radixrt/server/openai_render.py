"""The pieces of an OpenAI response built from finished or running requests: a choice with its
logprobs (chat or text shape) and the usage block."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from radixrt.server.req_state import ReqState


class ChoiceRenderer:
    """Renders choices; token strings are decoded once and kept (the vocabulary is fixed)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._token_str = lru_cache(maxsize=65536)(self._decode_token)

    def choice(
        self, index: int, state: ReqState, text: str, first_token: int, is_chat: bool
    ) -> dict[str, Any]:
        """A choice with its text (as `delta`) and the logprobs of tokens from `first_token`."""
        req = state.out
        reason = req.finish_reason
        choice: dict[str, Any] = {
            "index": index,
            "delta": text,
            "logprobs": None,
            "finish_reason": None if reason is None else reason.kind.value,
        }
        if req.sampling_params.return_logprob:
            choice["logprobs"] = (self._chat_logprobs if is_chat else self._text_logprobs)(
                state, first_token
            )
        return choice

    def _chat_logprobs(self, state: ReqState, start: int) -> dict[str, Any]:
        req = state.out
        ids = req.output_ids[start:]
        tops = req.output_top_logprobs[start:] or [[] for _ in ids]
        content = []
        for t, lp, top in zip(ids, req.output_logprobs[start:], tops, strict=False):
            entry = self._token_entry(lp, t)
            entry["top_logprobs"] = [self._token_entry(tlp, tt) for tlp, tt in top]
            content.append(entry)
        return {"content": content, "refusal": None}

    def _text_logprobs(self, state: ReqState, start: int) -> dict[str, Any]:
        """Tokens from `start` on; a stream calls this with growing `start`, and the
        characters before it are carried on the state, so a whole stream costs O(tokens)."""
        req = state.out
        ids = list(req.output_ids)
        counted, offset = state.text_offset
        if counted > start:
            counted, offset = 0, 0
        offset += sum(len(self._token_str(t)) for t in ids[counted:start])
        state.text_offset = (start, offset)
        tokens = [self._token_str(t) for t in ids[start:]]
        offsets = []
        for tok in tokens:
            offsets.append(offset)
            offset += len(tok)
        has_top = req.sampling_params.top_logprobs_num > 0
        return {
            "tokens": tokens,
            "token_logprobs": list(req.output_logprobs[start : len(ids)]),
            "top_logprobs": [
                {self._token_str(t): lp for lp, t in top}
                for top in req.output_top_logprobs[start : len(ids)]
            ]
            if has_top
            else None,
            "text_offset": offsets,
        }

    def _token_entry(self, logprob: float, token_id: int) -> dict[str, Any]:
        s = self._token_str(token_id)
        return {"token": s, "logprob": logprob, "bytes": list(s.encode())}

    def _decode_token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])


def usage_of(states: list[ReqState], n: int) -> dict[str, Any]:
    """Prompt tokens count once per prompt (its first sample), completions once per sample."""
    firsts = states[::n]
    prompt = sum(s.out.prompt_len for s in firsts)
    completion = sum(len(s.out.output_ids) for s in states)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(s.out.cached_tokens for s in firsts)},
    }
