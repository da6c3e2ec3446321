"""Perplexity of a model on a fixed text, float32 against bfloat16 weights and weight-only int8
on the CPU kernels (or any set of `--settings`, e.g. bfloat16-torch: a whole bfloat16 model).

    python -m benchmarks perplexity [--model-path DIR] [--text FILE]

The text (default: benchmarks/fixtures/perplexity.txt, 343 words of plain English written for
this) is scored in one prompt: perplexity = exp(-mean log p(token | the tokens before it))
over every token but the first. Prints each setting's perplexity and its ratio to float32's.
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
    "kv-bf16": {"dtype": "float32", "kv_cache_dtype": "bfloat16"},
    "bfloat16+kv-bf16": {"dtype": "bfloat16", "kv_cache_dtype": "bfloat16"},
}


def perplexity(engine: Any, text: str) -> tuple[float, int]:
    """(perplexity, tokens scored) of `text` under an Engine's model."""
    out = engine.generate(
        text,
        {"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 0},
    )
    logprobs = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"][1:]]
    return math.exp(-sum(logprobs) / len(logprobs)), len(logprobs)


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
    args = p.parse_args(argv)
    text = args.text.read_text()
    results: dict[str, float] = {}
    for name in args.settings:
        with Engine(args.model_path, **SETTINGS[name]) as e:
            results[name], n = perplexity(e, text)
        ratio = results[name] / results[args.settings[0]]
        print(f"{name:>14}: perplexity {results[name]:.3f} over {n} tokens ({ratio:.4f}x)",
              flush=True)  # fmt: skip
    return results


if __name__ == "__main__":
    main()
