"""Scoring `select` choices on a backend: the logprobs of each choice's tokens after the prompt.

Tokenization happens on the backend only, so the tokens scored are exactly the ones the model
would see for prompt + choice:

1. The prompt alone is sent with `max_new_tokens: 0`: it is computed and cached once, and its
   `prompt_tokens` gives its length `n`.
2. One batched call sends [prompt, prompt + choice_1, ...] with `max_new_tokens: 0`,
   `return_logprob` and `logprob_start_len = n - WINDOW`. Each result lists (logprob, token
   id) from that position on; only the last WINDOW prompt tokens are recomputed, the rest
   are cache hits.
3. A choice's tokens start where its ids first differ from the prompt's own ids in that
   window, usually at `n`, earlier when the tokenizer merges the prompt's end with the
   choice's start (then that merged token is scored too, for every choice alike). When the
   ids already differ at the window's first position, the call is redone from position 0.
4. `unconditional_likelihood_normalized` also scores each choice's token ids alone.
"""

from __future__ import annotations

from typing import Any

from radixrt_lang.backends.base import BaseBackend, Result
from radixrt_lang.choices import BaseChoiceMethod, ChoiceResult
from radixrt_lang.errors import NotSupportedError

WINDOW = 4  # prompt tokens re-scored before the choices, to find where each choice starts


def score_choices(
    backend: BaseBackend, prompt: str, choices: list[str], method: BaseChoiceMethod
) -> tuple[ChoiceResult, dict[str, Any]]:
    """Pick one of `choices` to follow `prompt`; returns the decision and its meta info."""
    if not backend.can_score:
        raise NotSupportedError(
            f"select is not supported by this backend ({backend!r}): it "
            "needs the logprobs of prompt tokens"
        )
    if not choices or not all(isinstance(c, str) and c for c in choices):
        raise ValueError("choices must be a non-empty list of non-empty strings")
    prompt_len, cached = 0, 0
    if prompt:
        meta = backend.generate([prompt], {"max_new_tokens": 0})[0]["meta_info"]
        prompt_len, cached = meta["prompt_tokens"], meta["cached_tokens"]
    start = max(prompt_len - WINDOW, 0)
    scored = _score(backend, prompt, choices, start)
    if scored is None:
        scored = _score(backend, prompt, choices, 0)
    assert scored is not None
    spans, results = scored
    logprobs = [[0.0 if lp is None else lp for lp, _ in span] for span in spans]
    unconditional = None
    if method.requires_unconditional_logprobs:
        unconditional = _score_alone(backend, [[tid for _, tid in span] for span in spans])
    result = method(choices, logprobs, unconditional)
    meta_info = {
        "prompt_tokens": prompt_len,
        "cached_tokens": cached,
        "choices": list(choices),
        "choices_method": method.name,
        "choices_cached_tokens": [r["meta_info"]["cached_tokens"] for r in results],
        "input_token_logprobs": spans,
        "normalized_prompt_logprobs": result.normalized_prompt_logprobs,
        "unconditional_token_logprobs": unconditional,
        "finish_reason": {"type": "stop", "matched": result.decision},
    }
    return result, meta_info


def _score(
    backend: BaseBackend, prompt: str, choices: list[str], start: int
) -> tuple[list[list[tuple[float | None, int]]], list[Result]] | None:
    """Per choice, [(logprob, id)] of its tokens; None if a choice may start before `start`."""
    texts = ([prompt] if prompt else []) + [prompt + c for c in choices]
    results = backend.generate(
        texts,
        {"max_new_tokens": 0, "temperature": 0, "return_logprob": True, "logprob_start_len": start},
    )
    window = [e[1] for e in results[0]["meta_info"]["input_token_logprobs"]] if prompt else []
    choice_results = results[1:] if prompt else results
    spans = []
    for choice, r in zip(choices, choice_results, strict=True):
        entries = [(e[0], e[1]) for e in r["meta_info"]["input_token_logprobs"]]
        first = 0
        while first < min(len(window), len(entries)) and entries[first][1] == window[first]:
            first += 1
        if first == 0 and start > 0:
            return None
        if first == len(entries):
            raise ValueError(f"choice {choice!r} adds no tokens to the prompt")
        spans.append(entries[first:])
    return spans, choice_results


def _score_alone(backend: BaseBackend, id_lists: list[list[int]]) -> list[list[float]]:
    results = backend.generate(
        id_lists,
        {"max_new_tokens": 0, "temperature": 0, "return_logprob": True, "logprob_start_len": 0},
    )
    return [
        [0.0 if e[0] is None else e[0] for e in r["meta_info"]["input_token_logprobs"]]
        for r in results
    ]
