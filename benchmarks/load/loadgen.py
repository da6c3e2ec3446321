"""`python -m benchmarks loadgen`: a load generator for a radixrt or
OpenAI-compatible server.

Sessions (see datasets.py) start at Poisson arrival times (`--request-rate`, inf: all at
once); within a session each turn waits for the previous answer. At most
`--max-concurrency` requests are in flight. Prints a summary table and appends one JSON line
per run to `--output-file`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.load.clients import BACKENDS, BaseClient, make_client
from benchmarks.load.datasets import DATASETS, Dataset, Session, WordSource, make_dataset
from benchmarks.load.metrics import RequestRecord, format_summary, summarize, ttft_by_turn

# Dataset size flags: flag name -> (dataset, keyword of its maker).
SIZE_FLAGS = {
    "random_input_len": ("random", "input_len"),
    "random_output_len": ("random", "output_len"),
    "num_groups": ("shared-prefix", "num_groups"),
    "prompts_per_group": ("shared-prefix", "prompts_per_group"),
    "system_len": ("shared-prefix", "system_len"),
    "question_len": ("shared-prefix", "question_len"),
    "sp_output_len": ("shared-prefix", "output_len"),
    "num_conversations": ("multi-turn", "num_conversations"),
    "num_turns": ("multi-turn", "num_turns"),
    "turn_len": ("multi-turn", "turn_len"),
    "mt_output_len": ("multi-turn", "output_len"),
    "num_agents": ("agent", "num_agents"),
    "num_steps": ("agent", "num_steps"),
    "tools_len": ("agent", "tools_len"),
    "agent_output_len": ("agent", "output_len"),
}


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks loadgen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", choices=BACKENDS, default="radixrt")
    p.add_argument("--base-url", default="http://127.0.0.1:30000")
    p.add_argument("--model", default=None, help="OpenAI model name; default: /v1/models' first")
    p.add_argument("--model-path", default=None, help="tokenizer for the prompts; default SmolLM2")
    p.add_argument("--dataset", choices=DATASETS, default="shared-prefix")
    p.add_argument(
        "--num-prompts",
        type=int,
        default=None,
        help="random: prompts; other datasets: cap on sessions",
    )
    p.add_argument(
        "--request-rate",
        type=float,
        default=float("inf"),
        help="sessions started per second (Poisson); inf: all at once",
    )
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--warmup", type=int, default=1, help="unrelated requests sent first")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before timing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--extra-request-body", default="{}", help="JSON merged into each body")
    p.add_argument("--output-file", default=None, help="append a JSON line with the results")
    p.add_argument("--label", default=None, help="name of this run in the summary and file")
    p.add_argument("--no-progress", action="store_true")
    for name, (ds, key) in SIZE_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=f"{ds}: {key}")
    return p


def build_dataset(args: argparse.Namespace, words: WordSource) -> Dataset:
    """The dataset named by args.dataset with the size flags given (the others default)."""
    sizes = {
        key: getattr(args, name)
        for name, (ds, key) in SIZE_FLAGS.items()
        if ds == args.dataset and getattr(args, name) is not None
    }
    if args.dataset == "random" and args.num_prompts is not None:
        sizes["num_prompts"] = args.num_prompts
    dataset = make_dataset(args.dataset, words, **sizes)
    if args.dataset != "random" and args.num_prompts is not None:
        dataset = Dataset(dataset.name, dataset.sessions[: args.num_prompts])
    return dataset


async def run_sessions(
    client: BaseClient,
    sessions: list[Session],
    request_rate: float,
    max_concurrency: int | None,
    seed: int,
    progress: bool = True,
) -> tuple[list[RequestRecord], float]:
    """Run every session; returns the records (in completion order) and the wall time."""
    limit = asyncio.Semaphore(max_concurrency or 1 << 30)
    records: list[RequestRecord] = []
    total = sum(len(s.turns) for s in sessions)
    rng = random.Random(seed)

    async def one(idx: int, session: Session, delay: float) -> None:
        await asyncio.sleep(delay)
        history = ""
        for k, turn in enumerate(session.turns):
            prompt = history + turn
            async with limit:
                record = RequestRecord(idx, k, time.perf_counter())
                await client.send(prompt, session.output_len, record)
            records.append(record)
            if progress:
                print(f"\r  {len(records)}/{total} requests", end="", file=sys.stderr, flush=True)
            if not record.ok:
                return
            history = prompt + record.text

    delays, t = [], 0.0
    for _ in sessions:
        delays.append(t)
        if request_rate != float("inf"):
            t += rng.expovariate(request_rate)
    start = time.perf_counter()
    await asyncio.gather(*(one(i, s, d) for i, (s, d) in enumerate(zip(sessions, delays))))
    duration = time.perf_counter() - start
    if progress:
        print(file=sys.stderr)
    return records, duration


async def run_benchmark(
    args: argparse.Namespace, words: WordSource | None = None
) -> dict[str, Any]:
    """One run as the flags say; returns the summary (also written where the flags ask)."""
    words = words or load_words(args.model_path, args.seed)
    dataset = build_dataset(args, words)
    extra = json.loads(args.extra_request_body)
    timeout = httpx.Timeout(3600.0, connect=30.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        client = await make_client(args.backend, http, args.base_url, extra, args.model)
        if args.warmup:
            warm = [Session((words.text(16),), (16,), 4) for _ in range(args.warmup)]
            await run_sessions(client, warm, float("inf"), None, args.seed, progress=False)
        flushed = await client.flush_cache() if args.flush_cache else None
        records, duration = await run_sessions(
            client,
            dataset.sessions,
            args.request_rate,
            args.max_concurrency,
            args.seed,
            progress=not args.no_progress,
        )
    summary = summarize(records, duration)
    summary.update(
        {
            "label": args.label or args.backend,
            "backend": args.backend,
            "dataset": dataset.name,
            "num_sessions": len(dataset.sessions),
            "num_requests": dataset.num_requests,
            "optimal_hit_rate": dataset.optimal_hit_rate(),
            "flushed": flushed,
            "request_rate": args.request_rate,
            "max_concurrency": args.max_concurrency,
            "ttft_by_turn_s": ttft_by_turn(records),
            # requests that ended before output_len tokens (a server ignoring ignore_eos, or
            # interrupting a stream): their throughput is not comparable
            "short_outputs": sum(
                r.ok and r.output_tokens < dataset.sessions[r.session_idx].output_len
                for r in records
            ),
        }
    )
    if args.output_file:
        with open(args.output_file, "a") as f:
            f.write(json.dumps(summary, default=str) + "\n")
    return summary


def load_words(model_path: str | None, seed: int) -> WordSource:
    """Words from the tokenizer of `model_path` (default: the bundled SmolLM2)."""
    from radixrt.model.families.loader import load_tokenizer, resolve_model_path

    return WordSource.from_tokenizer(load_tokenizer(resolve_model_path(model_path)), seed)


def main(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    summary = asyncio.run(run_benchmark(args))
    print(format_summary(f"{summary['label']} / {summary['dataset']}", summary))
    if summary["short_outputs"]:
        print(f"warning: {summary['short_outputs']} requests stopped before their output length")
    if summary["hit_rate"] is not None:
        print(f"hit rate {summary['hit_rate']:.3f}, optimal {summary['optimal_hit_rate']:.3f}")
    if args.output_file:
        print(f"appended to {Path(args.output_file)}")


if __name__ == "__main__":
    main()
