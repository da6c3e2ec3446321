"""gpu_check's shared-prefix stage: the radix cache on against off through the scheduler.

The Engine minus its thread: a Scheduler over a ModelRunner built around a random-weight model
(no checkpoint, no tokenizer), fed G groups of P requests, each its group's S-token system
prompt plus Q unique tokens, asking for O greedy tokens with EOS ignored. All requests are
queued at once, in a shuffled order, and stepped until idle.
"""

from __future__ import annotations

import random
import time
import traceback
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from radixrt.core import Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.executor.model_runner import ModelRunner
from radixrt.scheduler.builder import assemble_scheduler
from radixrt.scheduler.scheduler import Scheduler, SchedulerStats

if TYPE_CHECKING:
    from torch import nn

    from tests.gpu.check import Check


@dataclass(frozen=True, slots=True)
class Workload:
    groups: int = 8
    per_group: int = 16
    system_len: int = 1024
    question_len: int = 64
    output_len: int = 32

    @property
    def num_requests(self) -> int:
        return self.groups * self.per_group


@dataclass(slots=True)
class RunResult:
    label: str
    wall_s: float
    req_per_s: float
    out_tok_per_s: float
    total_tok_per_s: float  # prompt + output tokens per second
    hit_rate: float
    forward_passes: int


def build_scheduler(
    model: nn.Module,
    *,
    radix_cache: bool,
    graphs: bool,
    max_running_requests: int,
    max_total_tokens: int,
    context_length: int,
    cuda_graph_max_bs: int = 64,
    cpu_kernels: str = "auto",
) -> Scheduler:
    """The scheduler radixrt.scheduler.builder assembles, around an in-memory model."""
    device = next(model.parameters()).device.type
    cache = CacheConfig(max_total_tokens=max_total_tokens, disable_radix_cache=not radix_cache)
    runner = ModelRunner(
        ModelConfig(
            device=device,
            context_length=context_length,
            disable_cuda_graph=not graphs,
            cuda_graph_max_bs=cuda_graph_max_bs,
            cpu_kernels=cpu_kernels,
        ),
        cache,
        max_running_requests,
        model=model,
    )
    config = SchedulerConfig(max_running_requests=max_running_requests)
    return assemble_scheduler(runner, cache, config)


def run_to_completion(
    sched: Scheduler, prompts: list[list[int]], params: SamplingParams
) -> list[Req]:
    """Queue every prompt and step until idle; the pool must be whole again."""
    reqs = [Req(f"r{i}", list(p), params) for i, p in enumerate(prompts)]
    for r in reqs:
        sched.add_request(r)
    while not sched.is_idle:
        sched.step()
    sched.check_pool_whole()
    return reqs


def greedy(max_new_tokens: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True)


def build_prompts(w: Workload, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Every request's ids, shuffled: group g's system prompt + a unique question."""
    gen = torch.Generator().manual_seed(seed)
    systems = torch.randint(0, vocab_size, (w.groups, w.system_len), generator=gen).tolist()
    questions = torch.randint(
        0, vocab_size, (w.num_requests, w.question_len), generator=gen
    ).tolist()
    prompts = [systems[i // w.per_group] + questions[i] for i in range(w.num_requests)]
    random.Random(seed).shuffle(prompts)
    return prompts


def stage_shared_prefix(c: Check, d: dict[str, Any]) -> str:
    """G=8 x P=16, S=1024, Q=64, O=32 on a random Llama-3-8B shape, radix cache on and off."""
    from tests.gpu import common as gb
    from tests.gpu.model_stages import free_memory

    if c.dry_run:
        device, arch, w = torch.device("cpu"), gb.TINY_LLAMA, Workload(2, 3, 48, 8, 4)
    else:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        device, arch, w = torch.device("cuda"), gb.LLAMA3_8B, Workload()
    dtype = torch.float32 if c.dry_run else torch.bfloat16
    ctx = w.system_len + w.question_len + w.output_len + 16
    model = gb.random_llama(arch, device, dtype, max_position=ctx)
    prompts = build_prompts(w, arch.vocab_size)
    d["workload"] = asdict(w)
    results: dict[str, RunResult] = {}
    outputs: dict[str, list[list[int]]] = {}
    graphs = not c.dry_run
    for label, radix in (("radix on", True), ("radix off", False)):
        kwargs: dict[str, Any] = dict(
            radix_cache=radix,
            max_running_requests=w.num_requests,
            max_total_tokens=w.num_requests * ctx + 64,
            context_length=ctx,
            cuda_graph_max_bs=w.num_requests,
        )
        sched = None
        try:
            sched = build_scheduler(model, graphs=graphs, **kwargs)
        except RuntimeError as e:  # graphs broken: still measure the cache, eagerly
            if not graphs:
                raise
            c.log(traceback.format_exc())
            d["graph_error"] = f"{type(e).__name__}: {e}"
            graphs = False
        if sched is None:  # outside the except: the traceback no longer pins the failed pool
            free_memory()
            sched = build_scheduler(model, graphs=False, **kwargs)
        run_to_completion(sched, prompts[:2], greedy(2))  # warm-up: first replays, JIT
        sched.kv.cache.reset()
        sched.stats = SchedulerStats()
        _sync(device)
        t0 = time.perf_counter()
        reqs = run_to_completion(sched, prompts, greedy(w.output_len))
        _sync(device)
        wall = time.perf_counter() - t0
        num_prompt = sum(len(p) for p in prompts)
        num_out = sum(len(r.output_ids) for r in reqs)
        results[label] = RunResult(
            label,
            wall,
            len(reqs) / wall,
            num_out / wall,
            (num_prompt + num_out) / wall,
            sched.stats.hit_rate,
            sched.stats.forward_passes,
        )
        outputs[label] = [r.output_ids for r in reqs]
        runner = sched.runner.graph_runner
        replays = "no CUDA graphs" if runner is None else f"{runner.num_replays} graph replays"
        c.log(f"  {label}: {_fmt(results[label])}, {replays}")
        del sched, reqs, runner
        free_memory()
    on, off = results["radix on"], results["radix off"]
    same = sum(a == b for a, b in zip(outputs["radix on"], outputs["radix off"], strict=True))
    d["runs"] = [asdict(r) for r in results.values()]
    d["speedup"] = on.total_tok_per_s / off.total_tok_per_s
    d["identical_outputs"] = same
    eager = " (CUDA graphs FAILED: eager)" if "graph_error" in d else ""
    return (
        f"radix on {on.req_per_s:.1f} req/s hit {on.hit_rate:.2f}, off {off.req_per_s:.1f} req/s; "
        f"on/off {d['speedup']:.2f}x; {same}/{w.num_requests} outputs identical{eager}"
    )


def _fmt(r: RunResult) -> str:
    return (
        f"{r.wall_s:.2f} s, {r.req_per_s:.1f} req/s, {r.out_tok_per_s:.0f} out tok/s, "
        f"{r.total_tok_per_s:.0f} tok/s in+out, hit rate {r.hit_rate:.3f}, "
        f"{r.forward_passes} forward passes"
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
