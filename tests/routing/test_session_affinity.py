"""cache_aware with a session key (`prompt_cache_key`, `user`, X-Session-Id): a session stays on
one replica while the loads are balanced, moves when they are not, and the record is bounded."""

from __future__ import annotations

from radixrt.core.config import RouterConfig
from radixrt.serve.placement import cache_aware as cache_aware_module
from radixrt.serve.placement.cache_aware import CacheAwarePolicy
from radixrt.serve.placement.policy import RouteRequest, WorkerLoad, make_policy


def loads(*values: int) -> list[WorkerLoad]:
    return [WorkerLoad(f"w{i}", v) for i, v in enumerate(values)]


def policy(**kw: object) -> CacheAwarePolicy:
    made = make_policy(RouterConfig(router_policy="cache_aware", **kw))  # type: ignore[arg-type]
    assert isinstance(made, CacheAwarePolicy)
    return made


def prompt(i: int) -> tuple[int, ...]:
    """A prompt sharing nothing with any other `i`."""
    return tuple(range(i * 1000, i * 1000 + 50))


def test_a_session_sticks_to_one_replica_while_balanced() -> None:
    p = policy(balance_abs_threshold=8)
    first = p.select(RouteRequest(prompt(0), "key-a"), loads(0, 0))
    # unrelated prompts, the other replica less loaded (within the balance bounds): still home
    for i in range(1, 6):
        other_loads = loads(0, 3) if first == 1 else loads(3, 0)
        assert p.select(RouteRequest(prompt(i), "key-a"), other_loads) == first
    # without the key the same prompts would go to the less loaded replica
    assert p.select(RouteRequest(prompt(99)), loads(0, 3) if first == 1 else loads(3, 0)) != first


def test_a_session_beats_a_prefix_match_elsewhere() -> None:
    p = policy()
    shared = prompt(7)
    assert p.select(RouteRequest(shared), loads(0, 0)) == 0  # the shared prefix lands on w0
    assert p.select(RouteRequest(prompt(8), "key-b"), loads(1, 0)) == 1  # a new session: w1
    assert p.select(RouteRequest(shared + (1, 2), "key-b"), loads(0, 0)) == 1


def test_new_sessions_spread_and_each_stays_put() -> None:
    p = policy()
    homes = {s: p.select(RouteRequest(prompt(s), f"s{s}"), loads(0, 0)) for s in range(8)}
    assert set(homes.values()) == {0, 1}  # the fewest-items tie break spreads them
    for turn in range(3):
        for s, home in homes.items():
            assert p.select(RouteRequest(prompt(s) + (turn,), f"s{s}"), loads(1, 1)) == home


def test_imbalance_moves_the_session_and_it_stays_moved() -> None:
    p = policy(balance_abs_threshold=4, balance_rel_threshold=1.5)
    assert p.select(RouteRequest(prompt(0), "k"), loads(0, 0)) == 0
    assert p.select(RouteRequest(prompt(0) + (1,), "k"), loads(20, 2)) == 1  # imbalanced
    assert p.sessions["k"] == "w1"
    assert p.select(RouteRequest(prompt(0) + (2,), "k"), loads(0, 0)) == 1  # its new home


def test_an_empty_prompt_still_follows_its_session() -> None:
    p = policy()
    home = p.select(RouteRequest((), "k"), loads(0, 0))
    assert p.select(RouteRequest((), "k"), loads(2, 2)) == home


def test_a_home_not_offered_or_removed_is_replaced() -> None:
    p = policy()
    assert p.select(RouteRequest(prompt(0), "k"), loads(0, 0)) == 0
    # the router left w0 out (already tried, or down): w1 takes it and becomes the home
    assert p.select(RouteRequest(prompt(0), "k"), [WorkerLoad("w1", 0)]) == 0
    assert p.sessions["k"] == "w1"
    p.remove_worker("w1")
    assert not p.sessions


def test_the_session_record_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(cache_aware_module, "MAX_SESSIONS", 4)
    p = policy()
    for s in range(10):
        p.select(RouteRequest((), f"s{s}"), loads(0, 0))
    assert list(p.sessions) == ["s6", "s7", "s8", "s9"]
