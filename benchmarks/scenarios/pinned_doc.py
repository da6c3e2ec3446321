"""Does a pinned document survive a flood? One server with a small KV pool.

    python -m benchmarks pinned_doc [--model-path P] [--quick] [--json OUT]

A document of about --doc-tokens tokens is queried (the document and a new short question, one
output token) after every few flood requests, while --clients clients send unique prompts of
about --flood-tokens tokens, --flood-x times the pool in all. Between two queries the flood
brings more tokens than the pool holds beside the document, so the LRU cache evicts the
document's tail (leaves go first: the tree holds a long prompt as nodes cut at prefill chunks)
unless it is pinned. Two runs on one server, flushed in between: without a pin (the
document is sent once first, as a create would) and with it pinned by `POST /v1/caches`, its
queries sent with the `cache_id`. Prints each run's document queries: hit rate (cached / prompt
tokens) and median time to first token (the whole request: it makes one token), and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.systems import ManagedServer, free_port
from radixrt.model.cpu.build import cpu_flags, cpu_model

TOKENS_PER_SENTENCE = 14  # of `document` and `flood_prompt` with SmolLM2's tokenizer
GAP_MARGIN = 1.25  # flood tokens between two queries / room beside the document
PIN_FRACTION = "0.6"  # --max-pinned-fraction (and per tenant): the document must fit under it
QUICK = {"pool_tokens": 4096, "doc_tokens": 1500, "flood_tokens": 400, "flood_x": 1.5}


@dataclass(frozen=True, slots=True)
class Plan:
    """The sizes of one run; every count below follows from them."""

    pool_tokens: int
    doc_tokens: int
    flood_tokens: int
    flood_x: float

    @property
    def every(self) -> int:
        """Flood requests between two document queries: GAP_MARGIN times the room beside the
        document, so an unpinned document becomes the least recently used entry and loses at
        least its last node before its next query."""
        room = max(self.pool_tokens - self.doc_tokens, 0)
        return max(1, math.ceil(GAP_MARGIN * room / self.flood_tokens))

    @property
    def num_flood(self) -> int:
        return math.ceil(self.flood_x * self.pool_tokens / self.flood_tokens)

    def jobs(self) -> list[tuple[str, int]]:
        """("flood", i) and ("doc", j) in sending order: a query after every `every` floods."""
        out: list[tuple[str, int]] = []
        for i in range(self.num_flood):
            out.append(("flood", i))
            if (i + 1) % self.every == 0:
                out.append(("doc", (i + 1) // self.every - 1))
        return out


@dataclass(frozen=True, slots=True)
class Query:
    """One document query's figures."""

    prompt_tokens: int
    cached_tokens: int
    seconds: float


def summarize(queries: list[Query]) -> dict[str, Any]:
    """Hit rate (cached / prompt tokens over all queries) and the median seconds."""
    prompt = sum(q.prompt_tokens for q in queries)
    return {
        "queries": len(queries),
        "hit_rate": sum(q.cached_tokens for q in queries) / prompt if prompt else 0.0,
        "median_ttft_s": statistics.median(q.seconds for q in queries) if queries else 0.0,
    }


def compare(pinned: dict[str, Any], unpinned: dict[str, Any]) -> dict[str, float]:
    """Pinned over unpinned hit rate, and unpinned over pinned TTFT (how much faster)."""
    return {
        "hit_rate_ratio": _ratio(pinned["hit_rate"], unpinned["hit_rate"]),
        "ttft_speedup": _ratio(unpinned["median_ttft_s"], pinned["median_ttft_s"]),
    }


def document(tokens: int) -> str:
    return " ".join(
        f"Doc fact {i}: item {i} is kept." for i in range(tokens // TOKENS_PER_SENTENCE)
    )


def question(j: int) -> str:
    return f" Question {j}: which item is fact {j * 7}?"


def flood_prompt(tag: str, i: int, tokens: int) -> str:
    """A prompt no other (tag, i) shares more than its first few tokens with."""
    n = tokens // TOKENS_PER_SENTENCE
    return " ".join(f"{i}{tag} note {j}: value {j} is stored." for j in range(n))


async def one_run(url: str, plan: Plan, pinned: bool, clients: int) -> list[Query]:
    """The flood and the document queries of one run, `clients` requests at a time."""
    doc = document(plan.doc_tokens)
    tag = "P" if pinned else "U"
    async with httpx.AsyncClient(base_url=url, timeout=900) as http:
        cache_id = None
        if pinned:
            r = await http.post("/v1/caches", json={"text": doc, "ttl": 3600})
            r.raise_for_status()
            cache_id = r.json()["id"]
        else:
            await _generate(http, {"text": doc}, 0)
        jobs, queries = deque(plan.jobs()), []

        async def client() -> None:
            while jobs:
                kind, i = jobs.popleft()
                if kind == "flood":
                    await _generate(http, {"text": flood_prompt(tag, i, plan.flood_tokens)}, 1)
                    continue
                body = (
                    {"cache_id": cache_id, "text": question(i)}
                    if pinned
                    else {"text": doc + question(i)}
                )
                t0 = time.perf_counter()
                meta = await _generate(http, body, 1)
                seconds = time.perf_counter() - t0
                queries.append(Query(meta["prompt_tokens"], meta["cached_tokens"], seconds))

        await asyncio.gather(*(client() for _ in range(clients)))
    return queries


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK if args.quick else {k: getattr(args, k) for k in QUICK}
    plan = Plan(**sizes)
    cmd = [sys.executable, "-m", "radixrt.launch_server", "--port", str(free_port())]
    cmd += ["--max-total-tokens", str(plan.pool_tokens), "--log-level", "warning"]
    cmd += ["--max-pinned-fraction", PIN_FRACTION, "--max-pinned-fraction-per-tenant", PIN_FRACTION]
    if args.model_path:
        cmd += ["--model-path", args.model_path]
    tmp = Path(tempfile.mkdtemp(prefix="radixrt-pinned-doc-"))
    flags = set(cpu_flags().split())
    machine = {
        "cpu": cpu_model(),
        "avx512f": "avx512f" in flags,
        "avx2": "avx2" in flags,
        "load_avg_1m_start": _load(),
    }
    figures = {**asdict(plan), "every": plan.every, "num_flood": plan.num_flood}
    results: dict[str, Any] = {"plan": figures, "machine": machine}
    with ManagedServer(cmd, tmp / "server.log", ready_path="/health") as url:
        httpx.post(url + "/generate", json={"text": "warm up"}, timeout=300).raise_for_status()
        for name, pinned in (("unpinned", False), ("pinned", True)):
            t0 = time.perf_counter()
            queries = asyncio.run(one_run(url, plan, pinned, args.clients))
            results[name] = {**summarize(queries), "wall_s": round(time.perf_counter() - t0, 1)}
            results[name]["queries_detail"] = [asdict(q) for q in queries]
            httpx.post(url + "/flush_cache", timeout=60).raise_for_status()
    machine["load_avg_1m_end"] = _load()
    results["ratios"] = compare(results["pinned"], results["unpinned"])
    _print(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: the bundled SmolLM2")
    p.add_argument("--pool-tokens", type=int, default=8192, help="the server's KV pool")
    p.add_argument("--doc-tokens", type=int, default=4000)
    p.add_argument("--flood-tokens", type=int, default=512, help="per flood prompt")
    p.add_argument("--flood-x", type=float, default=3.0, help="flood tokens / pool, in all")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--quick", action="store_true", help=f"a smoke size: {QUICK}")
    p.add_argument("--json", default=None, help="write the figures here")
    return run(p.parse_args(argv))


# ---- private helpers -----------------------------------------------------------------------


async def _generate(http: httpx.AsyncClient, body: dict[str, Any], max_tokens: int) -> Any:
    params = {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    r = await http.post("/generate", json={**body, "sampling_params": params})
    r.raise_for_status()
    return r.json()["meta_info"]


def _print(results: dict[str, Any]) -> None:
    plan = results["plan"]
    print(
        f"pool {plan['pool_tokens']} tokens, document ~{plan['doc_tokens']}, "
        f"{plan['num_flood']} flood prompts of ~{plan['flood_tokens']} "
        f"({plan['flood_x']}x the pool), a query every {plan['every']}"
    )
    print("| run | document queries | hit rate | median TTFT s | run wall s |")
    print("|---|---:|---:|---:|---:|")
    for name in ("pinned", "unpinned"):
        r = results[name]
        print(
            f"| {name} | {r['queries']} | {r['hit_rate']:.3f} | {r['median_ttft_s']:.3f} "
            f"| {r['wall_s']} |"
        )
    ratios = results["ratios"]
    print(f"\nhit rate pinned / unpinned: {ratios['hit_rate_ratio']:.2f}")
    print(f"median TTFT unpinned / pinned: {ratios['ttft_speedup']:.2f}")
    m = results["machine"]
    print(
        f"cpu: {m['cpu']}, avx512f {m['avx512f']}, avx2 {m['avx2']}; load average (1 min) "
        f"{m['load_avg_1m_start']} at the start, {m['load_avg_1m_end']} at the end"
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def _load() -> float:
    return round(os.getloadavg()[0], 2)


if __name__ == "__main__":
    main()
