"""DataParallelManager over fake replicas: routing by prompt, rid checks, summed info, envs."""

from __future__ import annotations

import asyncio

import pytest

from radixrt.core.config import RouterConfig, ServerConfig
from radixrt.core.messages import CacheSummaryReplyMsg, InfoReplyMsg, MissMsg, SubtreeMsg
from radixrt.serve.http.args import parse_args
from radixrt.serve.http.dp_dispatcher import DataParallelManager, replica_envs
from radixrt.serve.placement.policy import make_policy


class FakeReplica:
    def __init__(self, free: int) -> None:
        self.tokenizer = self.ready = self.metrics = None
        self.config = ServerConfig()
        self.states: dict[str, object] = {}
        self.groups: dict[tuple[str, str], object] = {}
        self.dead_reason = None
        self.submitted: list[list[int]] = []
        self.free = free

    def submit(
        self, prompts, params, rids, extra_key=None, caller="", pins=None, endpoint=""
    ) -> list:
        self.submitted.append(prompts[0])
        for rid in rids or ():
            self.states[rid] = self.groups[(caller, rid)] = object()
        return []

    async def get_info(self) -> InfoReplyMsg:
        tree = {"spec_tree_steps": 2, "spec_tree_branches": 5, "spec_tree_side_accepts": 1}
        return InfoReplyMsg(
            0, 100, self.free, 100 - self.free, 0, 0, 0, 10, 5, 3, 0.5, 1, 0, **tree
        )

    async def cache_summary(self, max_rows: int = 20) -> CacheSummaryReplyMsg:
        """Root children of `free` and 10 tokens (the first with one child), one miss."""
        rows = [_row(1, self.free), _row(2, self.free // 2), _row(1, 10)]
        miss = MissMsg(float(self.free), None, 50, 0, "never_seen", 0, None, [], None, 0, 0, [])
        return CacheSummaryReplyMsg(0, 3, 3, self.free == 90, rows, 2, {"never_seen": 1}, [miss])


def _row(depth: int, tokens: int) -> SubtreeMsg:
    return SubtreeMsg(None, depth, 0, tokens, 1, 0, 0.0, 0, 0, [tokens])


def test_prompts_sharing_a_prefix_go_to_one_replica_and_info_adds_up() -> None:
    replicas = [FakeReplica(100), FakeReplica(90)]
    dp = DataParallelManager(replicas, make_policy(RouterConfig()))  # type: ignore[arg-type]
    a, b = list(range(50)), list(range(1000, 1050))
    for i in range(3):
        dp.submit([a + [i]], [], None)
        dp.submit([b + [i]], [], None)
    assert [len({tuple(p[:50]) for p in r.submitted}) for r in replicas] == [1, 1]
    assert dp.routed == [3, 3]
    dp.submit([a], [], ["r1"])
    with pytest.raises(ValueError, match="already in use"):
        dp.submit([b], [], ["r1"])  # rids are unique over all replicas
    info = asyncio.run(dp.get_info())
    assert info.max_total_tokens == 200 and info.free_tokens == 190
    assert info.cache_hit_rate == 0.5 and info.router_policy == "cache_aware"
    assert [r["routed_requests"] for r in info.replicas] == [4, 3]
    tree = (info.spec_tree_steps, info.spec_tree_branches, info.spec_tree_side_accepts)
    assert tree == (4, 10, 2)  # the draft-tree counters summed over the replicas


def test_cache_summaries_merge_by_size_with_each_row_named_by_its_replica() -> None:
    replicas = [FakeReplica(100), FakeReplica(90)]
    dp = DataParallelManager(replicas, make_policy(RouterConfig()))  # type: ignore[arg-type]
    merged = asyncio.run(dp.cache_summary(max_rows=5))
    rows = [(r.replica, r.depth, r.tokens) for r in merged.subtrees]
    assert rows == [("dp0", 1, 100), ("dp0", 2, 50), ("dp1", 1, 90), ("dp1", 2, 45), ("dp0", 1, 10)]
    assert (merged.num_nodes, merged.walked_nodes, merged.truncated) == (6, 6, True)
    assert merged.num_misses == 4 and merged.misses_by_cause == {"never_seen": 2}
    assert [(m.replica, m.at) for m in merged.misses] == [("dp0", 100.0), ("dp1", 90.0)]


def test_replica_envs_split_threads_on_cpu(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert replica_envs(parse_args(["--device", "cpu"])) == [None]
    envs = replica_envs(parse_args(["--device", "cpu", "--dp", "2"]))
    assert [e["OMP_NUM_THREADS"] for e in envs] == ["4", "4"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    envs = replica_envs(parse_args(["--device", "cuda", "--dp", "2"]))
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3", "5"]
    with pytest.raises(ValueError, match="needs 3 GPUs"):
        replica_envs(parse_args(["--device", "cuda", "--dp", "3"]))


def test_sessions_are_kept_apart_by_namespace() -> None:
    replicas = [FakeReplica(100), FakeReplica(100)]
    dp = DataParallelManager(replicas, make_policy(RouterConfig()))  # type: ignore[arg-type]
    dp.submit([list(range(40))], [], None, "tenant:a", session="s")
    dp.submit([list(range(500, 540))], [], None, "tenant:b", session="s")  # b names a's session
    sessions = dp.policy.sessions  # type: ignore[attr-defined]
    assert "s" not in sessions and len(sessions) == 2  # neither steers nor moves the other's
    dp.submit([list(range(900, 940))], [], None, None, session="s")  # no namespace: as before
    assert "s" in sessions
