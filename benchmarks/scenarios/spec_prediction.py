"""`python -m benchmarks prediction`: predicted outputs (OpenAI's `prediction`; the native
`prediction_ids`) on edits whose answer repeats a text the caller holds: output tokens/s with
the text given as the prediction against the same engine without it, on the default engine
(speculation off) and on one with lookup speculation (which already drafts from the prompt,
where the text also is); 1 and 8 streams; the outputs must be identical.

    python -m benchmarks prediction [--model-path DIR] [--draft-tokens 6] [--runs 3]

Workloads: the code edits of `python -m benchmarks spec` (b), the prediction the code as it
was; and a proofreading of a paragraph, the prediction the paragraph. Each engine runs in a
process of its own and they take turns (spec_worker.py), caches flushed before each batch.
vLLM has no predicted outputs (its OpenAI server takes no `prediction`); its n-gram
speculation on these prompts is `python -m benchmarks spec --peer vllm`'s code-edit row.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from typing import Any

from benchmarks.scenarios.spec import batches_rate
from benchmarks.scenarios.spec_worker import EngineProcess
from benchmarks.scenarios.spec_workloads import CODE, workloads

PARAGRAPH = (
    "The harbour authority publishd its anual report on Tuesday. Cargo volumes rose by "
    "four percent, mostly from container traffic, while bulk shipments of grain fell for "
    "the second year in a row. The report credits the new crane at berth seven and longer "
    "opening hours at the rail terminal, and it warns that the breakwater needs repairs "
    "before the winter storms. Fees for small vessels will stay the same next year."
)
PROOFREAD = "Fix the spelling mistakes in this paragraph. Reply with the paragraph only.\n\n"


def cases(tokenizer: Any) -> dict[str, tuple[list[str], dict[str, Any], list[int]]]:
    """name -> (eight prompts, greedy params, the prediction's token ids)."""
    code_prompts, greedy = workloads(tokenizer)["b-code-edit"]

    def chat(text: str) -> str:
        messages = [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    sentences = PARAGRAPH.split(". ")
    proofread = [
        chat(PROOFREAD + ". ".join(sentences[i % 3 :] + sentences[: i % 3])) for i in range(8)
    ]

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    return {
        "code-edit": (code_prompts, greedy, ids(CODE)),
        "proofread": (proofread, greedy, ids(PARAGRAPH)),
    }


def run(engines: list[EngineProcess], prompts: list[str], params: dict[str, Any],
        predicted: list[int], streams: int, runs: int) -> dict[str, Any]:  # fmt: skip
    """Median tokens/s of each (engine, without/with the prediction), engines taking turns."""
    batches = [prompts[i : i + streams] for i in range(0, len(prompts), streams)]
    modes = [(e, p) for e in engines for p in (params, {**params, "prediction_ids": predicted})]
    for engine, p in modes:
        engine.measure(batches[0], p)  # warm-up
    rates: list[list[float]] = [[] for _ in modes]
    outs: list[list[Any]] = [[] for _ in modes]
    for _ in range(runs):
        for i, (engine, p) in enumerate(modes):
            rate, outs[i] = batches_rate(engine, batches, p)
            rates[i].append(rate)
    ids = [[o["output_ids"] for o in got] for got in outs]
    medians = [statistics.median(r) for r in rates]
    # Each run's ratios against that run's plain rate: the spread a disturbed run shows.
    per_run = [[r[k] / rates[0][k] for k in range(runs)] for r in rates]

    def counts(got: list[Any]) -> tuple[int, int]:
        metas = [o["meta_info"] for o in got]
        acc = sum(m.get("prediction_accepted_tokens", 0) for m in metas)
        return acc, sum(m.get("prediction_rejected_tokens", 0) for m in metas)

    return {
        "tok_s": medians,
        "ratios": [m / medians[0] for m in medians],
        "ratio_ranges": [(min(q), max(q)) for q in per_run],
        "identical": all(x == ids[0] for x in ids),
        "prediction_counts": [counts(outs[1]), counts(outs[3])],
        "tokens": sum(len(x) for x in ids[0]),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from radixrt.model.families.loader import load_tokenizer, resolve_model_path

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-path", default="smollm2-135m")
    p.add_argument("--draft-tokens", type=int, default=6, help="the lookup engine's")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--streams", default="1,8", help="comma-separated stream counts")
    args = p.parse_args(argv)
    common = {"model_path": args.model_path, "max_total_tokens": 16384}
    configs = [common, {**common, "speculative_num_draft_tokens": args.draft_tokens}]
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        engines = [stack.enter_context(EngineProcess(c)) for c in configs]
        loads = cases(load_tokenizer(resolve_model_path(args.model_path)))
        print(f"{'workload':<10} {'streams':>7} {'plain tok/s':>11} {'+prediction':>11} "
              f"{'lookup':>7} {'lookup+prediction':>17} {'kept/rejected':>13} same")  # fmt: skip
        for name, (prompts, params, predicted) in loads.items():
            params = {**params, "max_new_tokens": args.max_new_tokens}
            for n in (int(s) for s in args.streams.split(",")):
                r = run(engines, prompts, params, predicted, n, args.runs)
                results[f"{name}/{n}"] = r
                q, spread = r["ratios"], r["ratio_ranges"]
                kept, rejected = r["prediction_counts"][0]
                print(f"{name:<10} {n:>7} {r['tok_s'][0]:>11.1f} {q[1]:>10.2f}x {q[2]:>6.2f}x "
                      f"{q[3]:>16.2f}x {kept:>6}/{rejected:<6} "
                      f"{'yes' if r['identical'] else 'NO'}  (runs: "
                      + ", ".join(f"{lo:.2f}-{hi:.2f}x" for lo, hi in spread[1:]) + ")",
                      flush=True)  # fmt: skip
    return results


if __name__ == "__main__":
    main()
