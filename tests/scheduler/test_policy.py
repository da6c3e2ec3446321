"""Admission order: lpm, dfs-weight, fcfs, random, and aging."""

from __future__ import annotations

import time

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.radix_cache import RadixCache
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.policy import SchedulePolicy


def _setup():
    alloc = TokenSlotAllocator(1000)
    cache = RadixCache(alloc)
    for key in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9], [7, 7, 7]):
        cache.insert(key, alloc.alloc(len(key)))

    def match(req: Req):
        m = cache.match_prefix(req.fill_ids[:-1])
        return int(m.slots.numel()), m.last_node

    return cache, match


def _req(rid: str, ids: list[int], age: float = 0.0) -> Req:
    r = Req(rid, ids, SamplingParams())
    r.arrival_time = time.monotonic() - age
    return r


def test_lpm_orders_by_cached_prefix_and_keeps_ties_fcfs() -> None:
    _, match = _setup()
    reqs = [
        _req("none", [8, 8, 8]),
        _req("short", [7, 7, 0, 0]),
        _req("long", [1, 2, 3, 4, 5, 0]),
        _req("none2", [9, 9]),
    ]
    order = SchedulePolicy("lpm", match, max_wait_s=60).order(reqs)
    assert [r.rid for r in order] == ["long", "short", "none", "none2"]


def test_aging_beats_policy() -> None:
    _, match = _setup()
    reqs = [_req("long", [1, 2, 3, 4, 5, 0]), _req("old", [8, 8], age=100)]
    order = SchedulePolicy("lpm", match, max_wait_s=10).order(reqs)
    assert [r.rid for r in order] == ["old", "long"]


def test_dfs_weight_groups_shared_subtrees_heaviest_first() -> None:
    _, match = _setup()
    reqs = [
        _req("a1", [7, 7, 7, 1, 0]),
        _req("b1", [1, 2, 3, 4, 5, 6, 1, 0]),
        _req("c1", [1, 2, 3, 9, 9, 1, 0]),
        _req("b2", [1, 2, 3, 4, 5, 6, 2, 0]),
        _req("c2", [1, 2, 3, 9, 9, 2, 0]),
        _req("b3", [1, 2, 3, 4, 5, 6, 3, 0]),
    ]
    order = [r.rid for r in SchedulePolicy("dfs-weight", match, max_wait_s=60).order(reqs)]
    assert order == ["b1", "b2", "b3", "c1", "c2", "a1"]


def test_fcfs_and_random() -> None:
    _, match = _setup()
    reqs = [_req(str(i), [i, i + 1]) for i in range(20)]
    assert SchedulePolicy("fcfs", match, 60).order(reqs) == reqs
    shuffled = SchedulePolicy("random", match, 60, seed=1).order(reqs)
    assert sorted(r.rid for r in shuffled) == sorted(r.rid for r in reqs) and shuffled != reqs
