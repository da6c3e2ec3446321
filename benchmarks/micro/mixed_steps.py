"""Where a shared-prefix chat workload's steps go on the offline Engine: each forward pass
timed and sorted into pure decode, mixed (prefill parts beside decode rows) and prefill-only
steps, with the tokens the prefill parts carry; `--unfused` runs every non-decode step on the
per-module path (the fused layers' `fuse_extend` off) for a before/after in one process."""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from typing import Any

from radixrt.core.forward_batch import ForwardBatch, ForwardMode


def _kind(fb: ForwardBatch) -> str:
    if fb.mode is ForwardMode.DECODE:
        return "decode"
    pairs = zip(fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)
    return "mixed" if any(e == 1 and p > 0 for p, e in pairs) else "prefill"


def _prompts(args: argparse.Namespace, vocab: int) -> list[list[int]]:
    rng = random.Random(args.seed)
    words = range(1000, min(vocab, 40000))
    systems = [[rng.choice(words) for _ in range(args.system_len)] for _ in range(args.groups)]
    return [
        systems[g] + [rng.choice(words) for _ in range(args.question_len)]
        for _ in range(args.per_group)
        for g in range(args.groups)
    ]  # interleaved across groups, as the chat workload sends them


def run(args: argparse.Namespace) -> dict[str, Any]:
    from radixrt.serve.engine import Engine

    engine = Engine(args.model_path, max_total_tokens=30000, kv_cache_dtype=args.kv_cache_dtype)
    runner = engine.scheduler.runner
    if args.unfused:
        for layer in runner.model.model.layers:
            if hasattr(layer, "fuse_extend"):
                layer.fuse_extend = False
    steps: list[tuple[str, int, int, float]] = []  # kind, tokens, prefill tokens, seconds
    inner = runner.forward_batch

    def timed(fb: ForwardBatch) -> Any:
        t0 = time.perf_counter()
        out = inner(fb)
        pre = sum(e for e in fb.extend_seq_lens_cpu if e > 1)
        steps.append((_kind(fb), fb.num_tokens, pre, time.perf_counter() - t0))
        return out

    runner.forward_batch = timed  # type: ignore[method-assign]
    prompts = _prompts(args, engine.tokenizer.vocab_size)
    params = {"max_new_tokens": args.output_len, "temperature": 0.0, "ignore_eos": True}
    engine.generate(input_ids=prompts[0][:64], sampling_params=params)  # warm-up
    engine.flush_cache()
    steps.clear()
    todo = list(prompts)
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                ids = todo.pop(0)
            engine.generate(input_ids=ids, sampling_params=params)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    layers = runner.model.model.layers
    engine.shutdown()
    report: dict[str, Any] = {
        "plan": runner.cpu_kernels.summary(),
        "fused_extend_layers": sum(bool(getattr(m, "fuse_extend", False)) for m in layers),
        "extend_passes_fused": getattr(layers[0], "extend_calls", 0),
        "wall_s": round(wall, 2),
        "req_s": round(len(prompts) / wall, 2),
    }
    for kind in ("decode", "mixed", "prefill"):
        mine = [s for s in steps if s[0] == kind]
        if mine:
            report[kind] = {
                "steps": len(mine),
                "ms_mean": round(1000 * statistics.fmean(s[3] for s in mine), 1),
                "ms_median": round(1000 * statistics.median(s[3] for s in mine), 1),
                "rows_mean": round(statistics.fmean(s[1] for s in mine), 1),
                "prefill_tokens": sorted({s[2] for s in mine}),
                "total_s": round(sum(s[3] for s in mine), 2),
            }
    return report


def replay(args: argparse.Namespace) -> dict[str, Any]:
    """The chat workload's kinds of pass, each captured once and replayed `--reps` times,
    fused and per-module alternately (minimum and median ms; robust to a shared machine): a
    decode pass of `--clients` - 1 rows, a mixed pass of those decodes and a new request's
    question over its cached system prompt, and a `--system-len` prefill chunk."""
    from radixrt.core import Req, SamplingParams
    from radixrt.core.config import split_kwargs
    from radixrt.scheduler.builder import build_scheduler

    flags = {"model_path": args.model_path, "max_total_tokens": 30000,
             "kv_cache_dtype": args.kv_cache_dtype}  # fmt: skip
    s, tok = build_scheduler(*split_kwargs(flags))
    runner, layers = s.runner, s.runner.model.model.layers
    prompts = _prompts(args, tok.vocab_size)
    seen: dict[str, ForwardBatch] = {}
    inner = runner.forward_batch

    def capture(fb: ForwardBatch) -> Any:
        kind = _kind(fb)
        if kind != "prefill" or kind not in seen:  # the first chunk, the last of the others
            seen[kind] = fb
        return inner(fb)

    runner.forward_batch = capture  # type: ignore[method-assign]
    params = SamplingParams(max_new_tokens=10**4, temperature=0.0, ignore_eos=True)
    for i, ids in enumerate(prompts[: args.clients - 1]):
        s.add_request(Req(f"r{i}", list(ids), params))
    while s.waiting or any(r.kv_len < len(r.input_ids) for r in s.running):
        s.step()
    s.step()  # a pure decode step
    s.add_request(Req("new", prompts[args.groups], params))  # group 0 again: a cached prefix
    s.step()
    del runner.forward_batch
    report: dict[str, Any] = {}
    for kind in ("decode", "mixed", "prefill"):
        fb = seen[kind]
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.reps):
            for fused in (True, False):
                for layer in layers:
                    layer.fuse_extend = fused
                t0 = time.perf_counter()
                runner.forward_batch(fb)
                times[fused].append(1000 * (time.perf_counter() - t0))
        parts = [e for p, e in zip(fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu) if e > 1]
        report[kind] = {"rows": fb.num_tokens, "prefill parts": parts}
        for fused, name in ((True, "fused"), (False, "modules")):
            ms = times[fused]
            report[kind][f"{name} ms min/median"] = (
                round(min(ms), 1),
                round(statistics.median(ms), 1),
            )
    s.close()
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--per-group", type=int, default=8)
    ap.add_argument("--system-len", type=int, default=530)
    ap.add_argument("--question-len", type=int, default=40)  # 24 words + the chat template
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--unfused", action="store_true")
    ap.add_argument("--replay", action="store_true", help="replay captured passes (above)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    for key, value in (replay(args) if args.replay else run(args)).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
