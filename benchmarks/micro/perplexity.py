"""Perplexity of a model on a fixed text, float32 against bfloat16 weights and weight-only int8
on the CPU kernels (or any set of `--settings`, e.g. bfloat16-torch: a whole bfloat16 model,
kv-fp8-e4m3: an fp8 KV pool).

    python -m benchmarks perplexity [--model-path DIR] [--text FILE] [--agreement 8]

The text (default: benchmarks/fixtures/perplexity.txt, 343 words of plain English written for
this) is scored in one prompt: perplexity = exp(-mean log p(token | the tokens before it))
over every token but the first. Prints each setting's perplexity and its ratio to the first
setting's. With --agreement N, N prompts (the text's first 20, 60, 100, ... words) are also
continued greedily for 32 tokens, and each setting's tokens compared with the first
setting's: the share of tokens equal at the same position, and of tokens before the first
difference (after it the two continue from different text). Reported, not asserted.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

TEXT = Path(__file__).resolve().parents[1] / "fixtures" / "perplexity.txt"
# Engine settings by name: float32 ("none"), bfloat16 linear weights on the kernels (AMX tiles
# where the CPU has them), a whole bfloat16 model on torch ops, weight-only int8; "+kv-bf16":
# the same with a bfloat16 KV pool (--kv-cache-dtype bfloat16).
SETTINGS: dict[str, dict[str, Any]] = {
    "none": {"dtype": "float32"},
    "bfloat16": {"dtype": "bfloat16"},
    "bfloat16-torch": {"dtype": "bfloat16", "cpu_kernels": "off"},
    "int8": {"dtype": "float32", "quantization": "int8"},
    "w8a8": {"dtype": "float32", "quantization": "w8a8"},
    "kv-bf16": {"dtype": "float32", "kv_cache_dtype": "bfloat16"},
    "bfloat16+kv-bf16": {"dtype": "bfloat16", "kv_cache_dtype": "bfloat16"},
    "kv-fp8-e4m3": {"dtype": "float32", "kv_cache_dtype": "fp8_e4m3"},
    "kv-fp8-e5m2": {"dtype": "float32", "kv_cache_dtype": "fp8_e5m2"},
}
NEW_TOKENS = 32


def perplexity(engine: Any, text: str) -> tuple[float, int]:
    """(perplexity, tokens scored) of `text` under an Engine's model."""
    out = engine.generate(
        text,
        {"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 0},
    )
    logprobs = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"][1:]]
    return math.exp(-sum(logprobs) / len(logprobs)), len(logprobs)


def greedy_outputs(engine: Any, prompts: list[str]) -> list[list[int]]:
    params = {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    return [out["output_ids"] for out in engine.generate(prompts, params)]


def agreement(ours: list[list[int]], ref: list[list[int]]) -> tuple[float, float]:
    """(tokens equal at the same position, tokens before each output's first difference),
    each as a share of all tokens."""
    same = before = total = 0
    for a, b in zip(ours, ref):
        eq = [x == y for x, y in zip(a, b)]
        same += sum(eq)
        before += eq.index(False) if False in eq else len(eq)
        total += len(b)
    return same / total, before / total


def main(argv: list[str] | None = None) -> dict[str, float]:
    from radixrt.serve.engine import Engine

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-path", default=None)
    p.add_argument("--text", type=Path, default=TEXT)
    p.add_argument(
        "--settings",
        "--quantization",
        nargs="+",
        default=["none", "bfloat16", "int8"],
        choices=list(SETTINGS),
        help="none: float32; the first is the ratios' reference",
    )
    p.add_argument("--agreement", type=int, default=0, metavar="N", help="greedy prompts")
    args = p.parse_args(argv)
    text = args.text.read_text()
    words = text.split()
    prompts = [" ".join(words[: 20 + 40 * i]) for i in range(args.agreement)]
    results: dict[str, float] = {}
    ref: list[list[int]] = []
    for name in args.settings:
        with Engine(args.model_path, **SETTINGS[name]) as e:
            results[name], n = perplexity(e, text)
            outs = greedy_outputs(e, prompts) if prompts else []
        ratio = results[name] / results[args.settings[0]]
        line = f"{name:>14}: perplexity {results[name]:.3f} over {n} tokens ({ratio:.4f}x)"
        if prompts:
            ref = ref or outs
            same, before = agreement(outs, ref)
            results[f"{name} agreement"], results[f"{name} agreement to first difference"] = (
                same,
                before,
            )
            line += f"; greedy agreement {same:.3f}, to the first difference {before:.3f}"
        print(line, flush=True)
    return results


if __name__ == "__main__":
    main()
