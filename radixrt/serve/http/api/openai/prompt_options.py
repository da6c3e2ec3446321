"""vLLM's options on a call's prompt and logprobs: truncate_prompt_tokens, completions' echo
text, prompt_logprobs, and which logprobs a render shows (LogprobAsk)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixrt.serve.http.protocol import BadRequestError, Limits

MAX_OPENAI_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class LogprobAsk:
    """What a call's logprobs show: the output tokens' with `output` alternatives each (None:
    no logprobs), the prompt's with `prompt` alternatives (vLLM's prompt_logprobs; None: not
    asked), tokens named "token_id:<id>" (`as_ids`). The request may compute more (one
    alternative count serves both): the render shows what was asked."""

    output: int | None = None
    prompt: int | None = None
    as_ids: bool = False


def add_prompt_logprobs(d: dict[str, Any], req: Any) -> None:
    """Sampling fields for vLLM's prompt_logprobs of `req` (a completions or chat body; this
    module sits below protocol.py, which imports it) (every prompt token scored; the
    alternatives' count the larger of the two asks), else nothing."""
    k = req.prompt_logprobs
    if k is None:
        return
    if not 0 <= k <= MAX_OPENAI_TOP_LOGPROBS:
        raise BadRequestError(f"prompt_logprobs must be in [0, {MAX_OPENAI_TOP_LOGPROBS}]")
    if req.stream:
        raise BadRequestError(
            "prompt_logprobs needs stream false: a prompt's logprobs are known when its "
            "request finishes"
        )
    top = max(d.get("top_logprobs_num", 0), k)
    d.update(return_logprob=True, logprob_start_len=0, top_logprobs_num=top)


def truncated(prompts: list[list[int]], keep: int | None, limits: Limits) -> list[list[int]]:
    """vLLM's truncate_prompt_tokens: each prompt's last `keep` tokens (-1: the context
    length; None: as they are)."""
    if keep is None:
        return prompts
    if keep == -1:
        keep = limits.context_length
    if keep < 1:
        raise BadRequestError(f"truncate_prompt_tokens must be -1 or >= 1, got {keep}")
    return [ids[-keep:] for ids in prompts]


def echo_prompts(
    req: Any, whole: list[list[int]], kept: list[list[int]], tokenizer: Any
) -> list[str] | None:
    """With `echo`, each prompt's text as its choices repeat it: a text prompt as sent, one of
    token ids decoded (on the tokenizer thread, once per prompt), one truncate_prompt_tokens
    cut (`kept` shorter than `whole`) as its kept tokens decode; None without echo."""
    if not req.echo:
        return None
    p = req.prompt
    texts = [p] if isinstance(p, str) else p if p and all(isinstance(x, str) for x in p) else None
    if texts is None:
        return [tokenizer.decode(ids) for ids in kept]
    return [text if len(ids) == len(full) else tokenizer.decode(ids)
            for text, full, ids in zip(texts, whole, kept, strict=True)]  # fmt: skip
