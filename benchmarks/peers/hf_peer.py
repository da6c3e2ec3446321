"""The peer: Hugging Face transformers `generate` on the same weights and workloads.

Greedy, float32 (or the benchmark's --dtype), KV cache on (transformers' default dynamic
cache), batches padded on the left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_NO_EOS = -1  # an id no token has: generation never stops on EOS, and EOS is not suppressed


@dataclass(slots=True)
class HFRun:
    """Timings of one `generate` call over a batch (seconds, wall clock)."""

    ttft_s: float  # call start to the first token's logits: the batched prefill
    total_s: float  # the whole call
    decode_s: float  # first token's logits to the last's: decode passes only
    num_decode_steps: int  # forward passes after the prefill
    step_s: list[float]  # each decode pass, logits to logits
    output_ids: list[list[int]]  # per prompt, the new tokens


def load_hf_model(path: str | Path, dtype: torch.dtype = torch.float32) -> Any:
    """AutoModelForCausalLM in `dtype` (float32 unless told), eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # generation-config notices would break up the tables
    hf_logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


@torch.inference_mode()
def hf_generate(
    model: Any, prompts: list[list[int]], max_new_tokens: int, pad_id: int = 0
) -> HFRun:
    """Greedy `generate` of exactly `max_new_tokens` per prompt, timed per pass.

    EOS is ignored as radixrt's `ignore_eos` does: it may be generated but does not stop the
    request. (`min_new_tokens` would instead forbid it, changing the greedy tokens.)
    """
    from transformers import LogitsProcessorList

    input_ids, attention_mask = left_pad(prompts, pad_id)
    clock = _PassClock()
    t0 = time.perf_counter()
    out = model.generate(
        input_ids,
        attention_mask=attention_mask,
        max_new_tokens=max_new_tokens,
        eos_token_id=_NO_EOS,
        do_sample=False,
        use_cache=True,
        pad_token_id=pad_id,
        temperature=None,
        top_p=None,
        top_k=None,
        logits_processor=LogitsProcessorList([clock]),
    )
    total = time.perf_counter() - t0
    times = clock.times
    if out.shape[1] != input_ids.shape[1] + max_new_tokens:
        raise RuntimeError(f"generate stopped early: {out.shape[1] - input_ids.shape[1]} tokens")
    return HFRun(
        ttft_s=times[0] - t0,
        total_s=total,
        decode_s=times[-1] - times[0],
        num_decode_steps=len(times) - 1,
        step_s=[b - a for a, b in zip(times, times[1:], strict=False)],
        output_ids=out[:, input_ids.shape[1] :].tolist(),
    )


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, max_len) int64, padded on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


class _PassClock:
    """A logits processor that only records when it is called: once per forward pass."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return scores
