"""The shared-prefix workload's passes (shared_prefix.py runs and reports them): its prompts, one
pass on the offline Engine with the radix cache on or off, and one on transformers, each timed
as its clients see it."""

from __future__ import annotations

import argparse
import gc
import math
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from benchmarks.micro.engine_rows import random_prompts
from benchmarks.peers.hf_peer import hf_generate, load_hf_model
from radixrt.core.other_load import OtherLoad

HF_REQUESTS = 16  # transformers runs on this many requests and is extrapolated to all


HF_BATCH_SIZE = 8


@dataclass(slots=True)
class Workload:
    groups: int
    per_group: int
    system_len: int
    question_len: int
    output_len: int

    @property
    def num_requests(self) -> int:
        return self.groups * self.per_group

    @property
    def optimal_hit_rate(self) -> float:
        """Shared fraction of prompt tokens when each group's first request computes its prefix."""
        n = self.num_requests
        return (n - self.groups) * self.system_len / (n * (self.system_len + self.question_len))


@dataclass(slots=True)
class RunResult:
    """One pass of the workload: throughput, mean time to first token and prefix-cache hits."""

    label: str
    num_requests: int  # measured
    wall_s: float  # first submission to last completion (extrapolated for a subset)
    req_s: float
    out_tok_s: float
    mean_ttft_s: float
    hit_rate: float | None
    extrapolated: bool = False
    other_cpu: float | None = None  # CPU share of other processes during this pass
    cached_tokens: list[int] = field(default_factory=list, repr=False)  # per request
    output_ids: list[list[int]] = field(default_factory=list, repr=False)
    kv_dtype: str | None = None  # the engine's KV pool, as resolved (`radixrt cost` reads it)
    kv_bytes_per_token: int | None = None


def build_prompts(w: Workload, vocab_size: int, seed: int) -> list[list[int]]:
    """All requests' token ids in submission order (shuffled with `seed`)."""
    systems = random_prompts(w.groups, w.system_len, vocab_size, seed)
    questions = random_prompts(w.num_requests, w.question_len, vocab_size, seed + 1)
    prompts = [systems[i // w.per_group] + questions[i] for i in range(w.num_requests)]
    random.Random(seed + 2).shuffle(prompts)
    return prompts


def run_engine(
    args: argparse.Namespace, prompts: list[list[int]], output_len: int, radix_cache: bool
) -> RunResult:
    """The whole workload through a fresh Engine; warm-up excluded from the figures."""
    from radixrt.serve.engine import Engine

    params = {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}
    with Engine(
        args.model_path,
        dtype="float32",
        device="cpu",
        disable_radix_cache=not radix_cache,
        max_total_tokens=args.max_total_tokens,
        page_size=args.page_size,
        max_running_requests=args.max_running_requests,
        chunked_prefill_size=args.chunked_prefill_size,
    ) as engine:
        engine.generate(input_ids=prompts[0][:16], sampling_params={**params, "max_new_tokens": 2})
        engine.flush_cache()
        before = engine.get_stats()
        workers = args.concurrency or len(prompts)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outs = list(pool.map(lambda ids: _stream_one(engine, ids, params), prompts))
        wall = time.perf_counter() - t0
        after = engine.get_stats()
        kv = _kv_figures(engine.scheduler.runner.token_to_kv_pool)
    prompt_tokens = after["prompt_tokens"] - before["prompt_tokens"]
    cached = after["cached_tokens"] - before["cached_tokens"]
    completion = sum(len(out["output_ids"]) for _, out in outs)
    page = f" page {args.page_size}" if args.page_size > 1 else ""
    label = f"radixrt{page}, radix cache {'on' if radix_cache else 'off'}"
    return RunResult(
        label,
        len(prompts),
        wall,
        len(prompts) / wall,
        completion / wall,
        sum(t for t, _ in outs) / len(outs),
        cached / max(prompt_tokens, 1),
        output_ids=[out["output_ids"] for _, out in outs],
        cached_tokens=[out["meta_info"]["cached_tokens"] for _, out in outs],
        kv_dtype=kv[0],
        kv_bytes_per_token=kv[1],
    )


def _kv_figures(pool: Any) -> tuple[str, int]:
    """(dtype name, bytes per token) of a TokenToKVPool, scales included."""
    from radixrt.cache.kv_dtype import kv_dtype_name

    per_token = pool.bytes_per_token(pool.num_layers, pool.num_kv_heads, pool.head_dim, pool.dtype)
    return kv_dtype_name(pool.dtype), per_token


def run_hf(
    model_path: Any, prompts: list[list[int]], output_len: int, batch_size: int, total_requests: int
) -> RunResult:
    """transformers `generate` over `prompts` in batches, one batch after another; figures are
    extrapolated to `total_requests` all arriving at once (batch k waits for batches < k)."""
    model = load_hf_model(model_path)
    hf_generate(model, [prompts[0][:16]], 2)  # warm-up
    runs = [
        hf_generate(model, prompts[i : i + batch_size], output_len)
        for i in range(0, len(prompts), batch_size)
    ]
    del model
    gc.collect()
    wall = sum(r.total_s for r in runs)
    per_req_s = wall / len(prompts)
    total_wall = per_req_s * total_requests
    num_batches = math.ceil(total_requests / batch_size)
    batch_s = wall / len(runs)
    prefill_s = sum(r.ttft_s for r in runs) / len(runs)
    mean_ttft = (num_batches - 1) / 2 * batch_s + prefill_s
    outputs = [ids for r in runs for ids in r.output_ids]
    return RunResult(
        f"transformers generate, batch {batch_size}",
        len(prompts),
        total_wall,
        total_requests / total_wall,
        total_requests * output_len / total_wall,
        mean_ttft,
        None,
        extrapolated=len(prompts) < total_requests,
        output_ids=outputs,
    )


def timed_pass(fn: Callable[[], RunResult]) -> RunResult:
    """Run one pass, noting other processes' CPU share; print a progress line."""
    load = OtherLoad()
    result = fn()
    result.other_cpu = load.fraction()
    print(f"done: {result.label}, {result.wall_s:.1f} s", flush=True)
    return result


def _stream_one(
    engine: Any, ids: list[int], params: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """(time to first token, final result) of one request, as its client sees them."""
    t0 = time.perf_counter()
    ttft, last = None, None
    for last in engine.generate(input_ids=ids, sampling_params=params, stream=True):
        if ttft is None and last["output_ids"]:
            ttft = time.perf_counter() - t0
    assert last is not None
    return (ttft if ttft is not None else time.perf_counter() - t0), last
