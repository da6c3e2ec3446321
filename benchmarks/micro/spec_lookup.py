"""Decoding at batch 1 with and without lookup speculation (--speculative-num-draft-tokens):
output tokens per second, tokens accepted per token drafted and forward passes per workload.

    python -m benchmarks spec_lookup [--model-path DIR] [--draft-tokens 5] [--runs 3]
                                     [--draft-model DIR]

With --draft-model the drafts come from that model (--speculative-draft-model) instead of
by lookup; the default model's own folder as its draft bounds what a draft model can give.

Workloads: text that repeats (its own tokens give the drafts), a count (the same), a chat
answer (little repeats), the chat prompt again with its answer in the prefix cache (the
tree gives the drafts; the other workloads flush the cache before each run), and a word salad
sampled at temperature 1 (seeded; drafts nearly always rejected: what the draft guard must
make cheap); the others are greedy. The two engines (with and without speculation) take turns
within each run. Each run's output is checked to be the same with and without speculation
(a seeded sampled one can differ where the C kernels' extend and decode logits differ, by up
to ~0.04 in logprob on the default model, and move a draw across a token's boundary).
Wall-clock figures on a shared machine are noisy: read the medians, and the forward passes,
which are exact.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import time
from typing import Any

CHAT = "Explain in a few sentences why the sky is blue."
# Hostile: a word salad (fixed seed) whose words recur, so one-token n-grams always draft, and
# what the model writes after it is rarely what followed those words before (the guard's case).
_WORDS = "amber vault nine drift copper hollow signal maple orbit thimble quartz lantern".split()
RANDOM = " ".join(random.Random(0).choices(_WORDS, k=60))
GREEDY: dict[str, Any] = {"temperature": 0}
# name -> (prompt, keep the cache between runs, sampling params besides max_new_tokens)
WORKLOADS: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "repeat-text": ("The quick brown fox jumps over the lazy dog. " * 3, False, GREEDY),
    "count": ("1, 2, 3, 4, 5, 6, 7, 8,", False, GREEDY),
    "chat": (CHAT, False, GREEDY),
    "chat-again": (CHAT, True, GREEDY),
    "random": (RANDOM, False, {"temperature": 1.0, "seed": 7}),  # seeded: the same output
}


def run(engines: list[Any], prompt: str, keep_cache: bool, params: dict[str, Any],
        runs: int) -> list[dict[str, Any]]:  # fmt: skip
    """Per engine: median tokens/s over `runs` (after one warm-up each; the engines take turns
    within each run, so load on the machine hits both alike), the last output and counts."""
    for engine in engines:
        engine.generate(prompt, params)  # warm-up; with keep_cache it also caches the answer
    rates: list[list[float]] = [[] for _ in engines]
    out: list[dict[str, Any]] = [{} for _ in engines]
    passes = [0] * len(engines)
    for _ in range(runs):
        for i, engine in enumerate(engines):
            if not keep_cache:
                engine.flush_cache()
            before = engine.get_stats()["forward_passes"]
            t0 = time.perf_counter()
            out[i] = engine.generate(prompt, params)
            rates[i].append(len(out[i]["output_ids"]) / (time.perf_counter() - t0))
            passes[i] = engine.get_stats()["forward_passes"] - before
    return [{"tok_s": statistics.median(r), "ids": o["output_ids"], "passes": n,
             "drafted": o["meta_info"].get("spec_draft_tokens", 0),
             "accepted": o["meta_info"].get("spec_accepted_tokens", 0)}
            for r, o, n in zip(rates, out, passes, strict=True)]  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from radixrt.serve.engine import Engine

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-path", default=None)
    p.add_argument("--draft-tokens", type=int, default=5)
    p.add_argument("--draft-model", default=None, help="draft with this model, not by lookup")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated names")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    ks = (0, args.draft_tokens)
    with contextlib.ExitStack() as stack:
        engines = [
            stack.enter_context(
                Engine(
                    args.model_path,
                    max_total_tokens=8192,
                    speculative_num_draft_tokens=k,
                    speculative_draft_model=args.draft_model if k else None,
                )
            )
            for k in ks
        ]
        for name in args.workloads.split(","):
            text, keep, sampling = WORKLOADS[name]
            prompt = engines[0].tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            ) if text == CHAT else text  # fmt: skip
            params = {**sampling, "max_new_tokens": args.max_new_tokens}
            for k, r in zip(ks, run(engines, prompt, keep, params, args.runs), strict=True):
                results.setdefault(name, {})[f"k={k}"] = r
    report: dict[str, Any] = {}
    for name, by_k in results.items():
        off, on = by_k["k=0"], by_k[f"k={args.draft_tokens}"]
        report[name] = {
            "tokens": len(on["ids"]), "same_output": on["ids"] == off["ids"],
            "tok_s_off": round(off["tok_s"], 1), "tok_s_on": round(on["tok_s"], 1),
            "speedup": round(on["tok_s"] / off["tok_s"], 2),
            "passes_off": off["passes"], "passes_on": on["passes"],
            "accepted": on["accepted"], "drafted": on["drafted"],
        }  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{'workload':<12} {'tokens':>6} {'same':>5} {'tok/s off':>9} {'tok/s on':>9} "
              f"{'speedup':>7} {'passes':>9} {'accepted/drafted':>17}")  # fmt: skip
        for name, r in report.items():
            print(f"{name:<12} {r['tokens']:>6} {r['same_output']!s:>5} {r['tok_s_off']:>9} "
                  f"{r['tok_s_on']:>9} {r['speedup']:>7} "
                  f"{r['passes_off']:>4}/{r['passes_on']:<4} "
                  f"{r['accepted']:>8}/{r['drafted']:<8}")  # fmt: skip
    return report


if __name__ == "__main__":
    main()
