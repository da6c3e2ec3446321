"""Greedy reference generation with Hugging Face transformers on the same weights."""

from __future__ import annotations

from pathlib import Path

import torch


def load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.inference_mode()
def hf_greedy(model, ids: list[int], max_new_tokens: int, eos: set[int] | None = None):
    """(tokens, logprobs) of greedy decoding with a KV cache; stops after an id in `eos`."""
    out = model.generate(
        torch.tensor([ids]),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        eos_token_id=sorted(eos) if eos else None,
        pad_token_id=0,
        min_new_tokens=0 if eos else max_new_tokens,
        temperature=None,
        top_p=None,
        top_k=None,
    )
    tokens = out.sequences[0, len(ids) :].tolist()
    logprobs = [torch.log_softmax(lg[0].float(), -1)[t].item() for lg, t in zip(out.logits, tokens)]
    return tokens, logprobs


@torch.inference_mode()
def hf_greedy_nocache(model, ids: list[int], max_new_tokens: int):
    """(tokens, logprobs) of greedy decoding by full recompute, never stopping early."""
    seq = list(ids)
    tokens, logprobs = [], []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([seq])).logits[0, -1].float()
        lp = torch.log_softmax(logits, -1)
        t = int(torch.argmax(logits))
        tokens.append(t)
        logprobs.append(lp[t].item())
        seq.append(t)
    return tokens, logprobs
