"""Shared-prefix workload against a `--dp N` server, once per routing policy.

    python -m benchmarks dp_routing [--dp 2] [--policies cache_aware round_robin]
        [-G 8] [-P 8] [-S 512] [-Q 32] [-O 16]

For each policy a fresh server is started (`python -m radixrt.launch_server --dp N
--router-policy P`), warmed up with one short request, and sent the workload of
`benchmarks.load.shared_prefix` (G groups of P requests sharing an S-token prefix, Q unique
tokens each, O greedy output tokens), all at once from client threads over /generate. Prints
the prefix-cache hit rate over all replicas (cached / prompt tokens of the workload), how many
requests each replica got, and throughput.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks.load.shared_prefix_passes import Workload, build_prompts
from benchmarks.peers.systems import ManagedServer, free_port


def run_policy(args: argparse.Namespace, policy: str) -> dict[str, Any]:
    """Start a server with `policy`, run the workload through it, stop it; the figures."""
    cmd = [
        sys.executable,
        "-m",
        "radixrt.launch_server",
        "--port",
        str(free_port()),
        "--dp",
        str(args.dp),
        "--router-policy",
        policy,
        "--log-level",
        "warning",
    ]
    if args.model_path:
        cmd += ["--model-path", args.model_path]
    if args.max_total_tokens:
        cmd += ["--max-total-tokens", str(args.max_total_tokens)]
    log_dir = Path(tempfile.mkdtemp(prefix="radixrt-dp-"))
    with ManagedServer(cmd, log_dir / f"server-{policy}.log") as url:
        vocab_size = httpx.get(url + "/get_model_info").json()["vocab_size"]
        w = Workload(
            args.groups, args.per_group, args.system_len, args.question_len, args.output_len
        )
        prompts = build_prompts(w, vocab_size, args.seed)
        _generate(url, [1, 2, 3], 1)  # warm-up
        before = httpx.get(url + "/get_server_info").json()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(lambda ids: _generate(url, ids, w.output_len), prompts))
        wall = time.perf_counter() - t0
        after = httpx.get(url + "/get_server_info").json()
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    cached = after["cached_tokens"] - before["cached_tokens"]
    routed = [
        a["routed_requests"] - b["routed_requests"]
        for a, b in zip(after["replicas"], before["replicas"])
    ]
    out_tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return {
        "policy": policy,
        "dp": args.dp,
        "requests": len(prompts),
        "wall_s": wall,
        "req_s": len(prompts) / wall,
        "out_tok_s": out_tokens / wall,
        "hit_rate": cached / prompt if prompt else 0.0,
        "optimal_hit_rate": w.optimal_hit_rate,
        "routed_per_replica": routed,
    }


def _generate(url: str, ids: list[int], max_new_tokens: int) -> dict[str, Any]:
    r = httpx.post(
        url + "/generate",
        timeout=None,
        json={
            "input_ids": ids,
            "sampling_params": {
                "max_new_tokens": max_new_tokens,
                "temperature": 0,
                "ignore_eos": True,
            },
        },
    )
    r.raise_for_status()
    return r.json()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--policies", nargs="+", default=["cache_aware", "round_robin"])
    p.add_argument("--max-total-tokens", type=int, default=None, help="per replica")
    p.add_argument("-G", "--groups", type=int, default=8)
    p.add_argument("-P", "--per-group", type=int, default=8, help="prompts per group")
    p.add_argument("-S", "--system-len", type=int, default=512, help="shared prefix tokens")
    p.add_argument("-Q", "--question-len", type=int, default=32, help="unique tokens")
    p.add_argument("-O", "--output-len", type=int, default=16, help="output tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", default=None, help="also write the results here")
    return p


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    results = []
    print(
        f"{'policy':<16} {'hit rate':>8} {'optimal':>8} {'req/s':>7} {'out tok/s':>9}  "
        "requests per replica",
        flush=True,
    )
    for policy in args.policies:
        r = run_policy(args, policy)
        results.append(r)
        print(
            f"{policy:<16} {r['hit_rate']:>8.3f} {r['optimal_hit_rate']:>8.3f} "
            f"{r['req_s']:>7.2f} {r['out_tok_s']:>9.1f}  {r['routed_per_replica']}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
