"""Perplexity of a model on a fixed text, float32 against weight-only int8 (or any set of
`--quantization` choices), on the CPU kernels.

    python -m radixrt.bench.micro.perplexity [--model-path DIR] [--text FILE]

The text (default: radixrt/testing/perplexity.txt, 343 words of plain English written for
this) is scored in one prompt: perplexity = exp(-mean log p(token | the tokens before it))
over every token but the first. Prints each setting's perplexity and its ratio to float32's.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

TEXT = Path(__file__).resolve().parents[2] / "testing" / "perplexity.txt"


def perplexity(engine: Any, text: str) -> tuple[float, int]:
    """(perplexity, tokens scored) of `text` under an Engine's model."""
    out = engine.generate(
        text,
        {"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 0},
    )
    logprobs = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"][1:]]
    return math.exp(-sum(logprobs) / len(logprobs)), len(logprobs)


def main(argv: list[str] | None = None) -> dict[str, float]:
    from radixrt.engine import Engine

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-path", default=None)
    p.add_argument("--text", type=Path, default=TEXT)
    p.add_argument("--quantization", nargs="+", default=["none", "int8"])
    args = p.parse_args(argv)
    text = args.text.read_text()
    results: dict[str, float] = {}
    for q in args.quantization:
        with Engine(args.model_path, quantization=None if q == "none" else q) as e:
            results[q], n = perplexity(e, text)
        ratio = results[q] / results[args.quantization[0]]
        print(f"{q:>6}: perplexity {results[q]:.3f} over {n} tokens ({ratio:.4f}x)", flush=True)
    return results


if __name__ == "__main__":
    main()
