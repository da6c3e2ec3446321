"""Routing policies with fake loads: threshold, imbalance fallback, hashing stability."""

from __future__ import annotations

import pytest

from radixrt.core.config import RouterConfig
from radixrt.serve.placement.consistent_hash import ConsistentHashPolicy
from radixrt.serve.placement.policy import ROUTING_POLICIES, RouteRequest, WorkerLoad, make_policy

PREFIX = tuple(range(100, 180))  # an 80-token shared prefix


def loads(*values: int) -> list[WorkerLoad]:
    return [WorkerLoad(f"w{i}", v) for i, v in enumerate(values)]


def cache_aware(**kw) -> object:
    return make_policy(RouterConfig(router_policy="cache_aware", **kw))


def test_registry_builds_every_policy_and_rejects_unknown() -> None:
    for name in ROUTING_POLICIES:
        policy = make_policy(RouterConfig(router_policy=name))
        assert policy.name == name
        assert 0 <= policy.select(RouteRequest((1, 2)), loads(0, 0)) < 2
    with pytest.raises(ValueError, match="router_policy must be one of"):
        make_policy(RouterConfig(router_policy="nope"))


def test_cache_aware_follows_a_match_above_the_threshold() -> None:
    policy = cache_aware(cache_threshold=0.5)
    assert policy.select(RouteRequest(PREFIX + (1, 2)), loads(0, 0)) == 0
    # a new prefix goes to the replica holding fewer items
    assert policy.select(RouteRequest((7,) * 20), loads(0, 0)) == 1
    # the group's prefix sits on w0: followed even though w0 is busier
    assert policy.select(RouteRequest(PREFIX + (3, 4)), loads(5, 0)) == 0
    # match 80 / 180 < 0.5: least loaded instead
    assert policy.select(RouteRequest(PREFIX + tuple(range(100))), loads(5, 0)) == 1


def test_cache_aware_falls_back_to_least_loaded_when_imbalanced() -> None:
    policy = cache_aware(balance_abs_threshold=8, balance_rel_threshold=1.5)
    assert policy.select(RouteRequest(PREFIX), loads(0, 0)) == 0
    # max - min = 6 <= 8: still balanced, the cache wins
    assert policy.select(RouteRequest(PREFIX + (1,)), loads(10, 4)) == 0
    # max - min = 9 > 8 but 27 <= 1.5 * 18: still balanced
    assert policy.select(RouteRequest(PREFIX + (2,)), loads(27, 18)) == 0
    # both bounds exceeded: the least loaded, and it learns the prefix
    assert policy.select(RouteRequest(PREFIX + (3,)), loads(20, 2)) == 1
    assert policy.trees["w1"].match(PREFIX) == len(PREFIX)


def test_cache_aware_keeps_each_group_on_one_replica() -> None:
    policy = cache_aware()
    groups = [tuple(range(g * 1000, g * 1000 + 60)) for g in range(4)]
    chosen: dict[int, set[int]] = {g: set() for g in range(4)}
    for i in range(5):
        for g, prefix in enumerate(groups):
            chosen[g].add(policy.select(RouteRequest(prefix + (i, g)), loads(i % 2, 0)))
    assert all(len(c) == 1 for c in chosen.values())
    assert {next(iter(c)) for c in chosen.values()} == {0, 1}  # both replicas are used


def test_cache_aware_prunes_and_forgets_removed_workers() -> None:
    policy = cache_aware(max_tree_size=50)
    for g in range(10):
        policy.select(RouteRequest(tuple(range(g * 100, g * 100 + 20))), loads(0))
    assert policy.trees["w0"].size <= 50
    policy.remove_worker("w0")
    assert policy.stats() == {"tree_sizes": {}}


def test_round_robin_and_least_load() -> None:
    rr = make_policy(RouterConfig(router_policy="round_robin"))
    assert [rr.select(RouteRequest(), loads(9, 0, 0)) for _ in range(4)] == [0, 1, 2, 0]
    ll = make_policy(RouterConfig(router_policy="least_load"))
    assert ll.select(RouteRequest(), loads(3, 1, 2)) == 1
    assert {ll.select(RouteRequest(), loads(0, 0)) for _ in range(4)} == {0, 1}  # ties rotate


def test_consistent_hash_is_sticky_and_stable_when_workers_change() -> None:
    policy = ConsistentHashPolicy(RouterConfig(router_policy="consistent_hash"))
    sessions = [f"user-{i}" for i in range(400)]
    three = ["w0", "w1", "w2"]
    before = {s: policy.owner(s, three) for s in sessions}
    assert all(policy.owner(s, three) == before[s] for s in sessions)  # sticky
    assert min(list(before.values()).count(w) for w in three) > 60  # roughly even shares
    # removing w1 moves only w1's sessions
    after = {s: policy.owner(s, ["w0", "w2"]) for s in sessions}
    assert all(after[s] == before[s] for s in sessions if before[s] != "w1")
    # adding w3 moves sessions only onto w3
    grown = {s: policy.owner(s, [*three, "w3"]) for s in sessions}
    moved = [s for s in sessions if grown[s] != before[s]]
    assert moved and all(grown[s] == "w3" for s in moved)
    assert len(moved) < len(sessions) / 2
    # through select: same session, same worker; no session: least loaded
    req = RouteRequest(session="user-7")
    idx = policy.select(req, loads(5, 0, 0))
    assert three[idx] == before["user-7"] and policy.select(req, loads(0, 0, 0)) == idx
    assert policy.select(RouteRequest(), loads(5, 0, 3)) == 1
