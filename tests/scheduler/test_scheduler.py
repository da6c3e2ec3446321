"""Scheduler behaviour on a tiny random Llama: mixed batches, chunking, retraction, cache on/off."""

from __future__ import annotations

import random

import pytest

from radixrt.core import FinishKind, Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.scheduler.builder import build_scheduler


def _build(path, max_total_tokens=4096, disable_radix_cache=False, page_size=1, **sched):
    scheduler, _ = build_scheduler(
        ModelConfig(model_path=str(path), context_length=512),
        CacheConfig(
            max_total_tokens=max_total_tokens,
            disable_radix_cache=disable_radix_cache,
            page_size=page_size,
        ),
        SchedulerConfig(**sched),
    )
    return scheduler


def _req(rid: str, ids: list[int], n: int = 10) -> Req:
    return Req(rid, list(ids), SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True))


def _run(s, reqs: list[Req], arrivals: dict[int, list[Req]] | None = None) -> dict[str, list[int]]:
    """Step until idle, adding arrivals[k] before step k; check the pool after every step."""
    for r in reqs:
        s.add_request(r)
    arrivals = arrivals or {}
    step = 0
    everyone = list(reqs) + [r for rs in arrivals.values() for r in rs]
    while not s.is_idle or any(k >= step for k in arrivals):
        for r in arrivals.pop(step, []):
            s.add_request(r)
        s.step()
        step += 1
        held = sum(s.kv.slots_held(r) for r in s.running)
        s.kv.check_whole(held)
        s.kv.cache.check_integrity()
    s.check_pool_whole()
    return {r.rid: r.output_ids for r in everyone}


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 49000) for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def sched(tiny_llama_path):
    return _build(tiny_llama_path)


@pytest.fixture(scope="module")
def alone(sched) -> dict[int, list[int]]:
    """Reference: each prompt run alone with the cache flushed."""
    out = {}
    for i, ids in enumerate(_prompts(7, [3, 30, 70, 120])):
        sched.kv.cache.reset()
        out[i] = _run(sched, [_req("a", ids, 12)])["a"]
    sched.kv.cache.reset()
    return out


def test_mixed_batches_match_alone(sched, alone) -> None:
    prompts = _prompts(7, [3, 30, 70, 120])
    first = [_req(f"r{i}", prompts[i], 12) for i in (0, 1)]
    later = {3: [_req("r2", prompts[2], 12)], 5: [_req("r3", prompts[3], 12)]}
    got = _run(sched, first, later)
    for i in range(4):
        assert got[f"r{i}"] == alone[i], i


def test_chunked_prefill_matches(tiny_llama_path, alone) -> None:
    s = _build(tiny_llama_path, chunked_prefill_size=16)
    got = _run(s, [_req(f"r{i}", ids, 12) for i, ids in enumerate(_prompts(7, [3, 30, 70, 120]))])
    for i in range(4):
        assert got[f"r{i}"] == alone[i]
    assert s.stats.forward_passes > 12


@pytest.mark.parametrize(("disable", "page_size"), [(False, 1), (True, 1), (False, 8), (True, 8)])
def test_tiny_pool_retracts_and_matches(
    tiny_llama_path, alone, disable: bool, page_size: int
) -> None:
    s = _build(
        tiny_llama_path, max_total_tokens=304, disable_radix_cache=disable, page_size=page_size
    )
    prompts = _prompts(7, [3, 30, 70, 120])
    got = _run(s, [_req(f"r{i}", ids, 12) for i, ids in enumerate(prompts)])
    for i in range(4):
        assert got[f"r{i}"] == alone[i]


@pytest.mark.parametrize("page_size", [1, 8])
def test_decode_retraction_under_pressure(tiny_llama_path, page_size: int) -> None:
    s = _build(tiny_llama_path, max_total_tokens=200, decode_reserve_tokens=0, page_size=page_size)
    prompts = _prompts(3, [40, 40, 40, 40])
    ref = {}
    for i, ids in enumerate(prompts):
        s.kv.cache.reset()
        ref[f"r{i}"] = _run(s, [_req(f"r{i}", ids, 30)])[f"r{i}"]
    s.kv.cache.reset()
    got = _run(s, [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)])
    assert got == ref
    assert s.stats.retractions > 0


def test_cache_on_off_same_tokens_and_hits(tiny_llama_path) -> None:
    base = _prompts(5, [60])[0]
    branches = [base + x for x in _prompts(6, [5, 9, 13])]
    on, off = _build(tiny_llama_path), _build(tiny_llama_path, disable_radix_cache=True)
    got_on = _run(on, [_req(f"b{i}", ids) for i, ids in enumerate(branches)])
    got_off = _run(off, [_req(f"b{i}", ids) for i, ids in enumerate(branches)])
    assert got_on == got_off
    assert on.stats.cached_tokens >= 2 * 60  # the second and third branch reuse the base
    assert off.stats.cached_tokens == 0


@pytest.mark.parametrize("page_size", [4, 16])
def test_page_size_matches(tiny_llama_path, alone, page_size: int) -> None:
    """Paged slots (each request's tokens in whole pages) give the same greedy tokens, on a
    cold cache and again on a warm one."""
    s = _build(tiny_llama_path, page_size=page_size)
    prompts = _prompts(7, [3, 30, 70, 120])
    got = _run(s, [_req(f"r{i}", ids, 12) for i, ids in enumerate(prompts)])
    again = _run(s, [_req(f"q{i}", ids, 12) for i, ids in enumerate(prompts)])
    for i in range(4):
        assert got[f"r{i}"] == alone[i] and again[f"q{i}"] == alone[i]


def test_rejections_are_clear(sched) -> None:
    too_long = _req("x", [5] * 600)
    sched.add_request(too_long)
    assert too_long.finish_reason.kind == FinishKind.ABORT
    assert "context length" in too_long.finish_reason.message
    bad = _req("y", [10**9])
    sched.add_request(bad)
    assert "input_ids" in bad.finish_reason.message
    assert sched.is_idle


def test_abort_frees_slots(sched) -> None:
    r = _req("z", _prompts(9, [50])[0], 100)
    sched.add_request(r)
    sched.step()
    sched.step()
    assert sched.abort("z") is r and r.finish_reason.kind == FinishKind.ABORT
    sched.check_pool_whole()


@pytest.mark.parametrize("shared", [100, 80])
def test_waits_for_a_shared_prefix_still_being_prefilled(tiny_llama_path, shared) -> None:
    s = _build(tiny_llama_path, chunked_prefill_size=64)
    base = _prompts(11, [shared])[0]
    first, second = _req("a", base + [5, 6]), _req("b", base + [7, 8])
    s.add_request(first)
    s.step()  # "a" has computed 64 of its tokens; the rest of the shared run (36 or 16) next
    got = _run(s, [second])
    assert got["b"] and second.cached_tokens >= shared - 4  # all of a's run, not just 64
    assert s.stats.cached_tokens == second.cached_tokens
    s.check_pool_whole()


def test_step_timing_counts_the_forward_inside_the_step(sched) -> None:
    """forward_time_s grows by each pass's forward, step_time_s by the whole step around it;
    an idle step adds to neither, and info() carries both."""
    sched.kv.cache.reset()
    before = (sched.stats.forward_time_s, sched.stats.step_time_s, sched.stats.forward_passes)
    sched.step()  # idle: no pass
    assert (sched.stats.forward_time_s, sched.stats.step_time_s) == before[:2]
    _run(sched, [_req("timed", _prompts(3, [40])[0], 6)])
    forward = sched.stats.forward_time_s - before[0]
    step = sched.stats.step_time_s - before[1]
    assert sched.stats.forward_passes - before[2] == 6  # one prefill pass, then 5 decodes
    assert 0 < forward < step
    info = sched.info()
    assert (info["forward_time_s"], info["step_time_s"]) == (
        sched.stats.forward_time_s,
        sched.stats.step_time_s,
    )
    sched.kv.cache.reset()
