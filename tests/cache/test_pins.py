"""Pinned prefixes on a radix tree: eviction, splits, expiry, sliding refresh, bounds, reset."""

from __future__ import annotations

import pytest

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.pins import NoPinTable, PinSpec, PinTable
from radixrt.cache.radix_cache import RadixCache

CAPACITY = 64


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup():
    alloc = TokenSlotAllocator(CAPACITY)
    cache = RadixCache(alloc)
    clock = Clock()
    pins = PinTable(cache, max_tokens=32, max_tokens_per_owner=20, clock=clock)
    yield alloc, cache, pins, clock
    pins.check()
    cache.check_integrity()
    pins.clear()
    cache.reset()
    assert alloc.num_free == CAPACITY


def insert(alloc: TokenSlotAllocator, cache: RadixCache, key: list[int], ns=None) -> None:
    slots = alloc.alloc(len(key))
    n = cache.insert(key, slots, ns)
    alloc.free(slots[:n])


def whole(alloc: TokenSlotAllocator, cache: RadixCache) -> int:
    return alloc.num_free + cache.evictable_size + cache.protected_size + cache.pinned_size


def test_a_pinned_prefix_survives_eviction_and_its_suffix_does_not(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, [1, 2, 3, 4, 5, 6])
    insert(alloc, cache, [9, 9, 9])
    out = pins.pin([1, 2, 3, 4, 5, 6], None, PinSpec(4, 60.0))
    assert out.pinned and out.tokens == 4 and out.new_tokens == 4
    assert cache.pinned_size == 4 and whole(alloc, cache) == CAPACITY
    assert cache.evict(CAPACITY) == 5  # [5, 6] and [9, 9, 9]; the pinned 4 stay
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]).slots.numel() == 4
    cache.check_integrity()


def test_a_split_below_and_above_the_pinned_node_keeps_the_pin(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, [1, 2, 3, 4])
    pins.pin([1, 2, 3, 4], None, PinSpec(4, 60.0))
    insert(alloc, cache, [1, 2, 7])  # splits the pinned node after 2 tokens
    cache.check_integrity()
    assert cache.pinned_size == 4
    assert cache.evict(CAPACITY) == 1  # only [7]
    assert cache.match_prefix([1, 2, 3, 4]).slots.numel() == 4


def test_expiry_turns_pinned_tokens_back_into_lru_entries(setup) -> None:
    alloc, cache, pins, clock = setup
    insert(alloc, cache, [1, 2, 3])
    pins.pin([1, 2, 3], None, PinSpec(3, 10.0))
    clock.now += 9.9
    assert pins.expire() == 0 and cache.pinned_size == 3
    clock.now += 0.2
    assert pins.expire() == 1
    assert cache.pinned_size == 0 and cache.evictable_size == 3
    assert cache.evict(3) == 3


def test_a_hit_extends_a_sliding_pin_but_not_a_fixed_one(setup) -> None:
    alloc, cache, pins, clock = setup
    insert(alloc, cache, [1, 2, 3])
    insert(alloc, cache, [5, 6])
    sliding = pins.pin([1, 2, 3], None, PinSpec(3, 10.0, sliding=True))
    pins.pin([5, 6], None, PinSpec(2, 10.0, "fixed", sliding=False))
    clock.now += 8
    for key in ([1, 2, 3, 4], [5, 6, 7]):
        pins.touch(cache.match_prefix(key).last_node)
    clock.now += 5  # 13 s after pinning: the sliding one lives until 18, the fixed one went
    assert pins.expire() == 1
    assert [(p[0], p[2]) for p in pins.pins()] == [(sliding.pin_id, 118.0)]
    assert cache.pinned_size == 3


def test_the_same_prefix_pinned_twice_is_one_pin_extended(setup) -> None:
    alloc, cache, pins, clock = setup
    insert(alloc, cache, [1, 2, 3])
    first = pins.pin([1, 2, 3], None, PinSpec(3, 10.0))
    clock.now += 5
    again = pins.pin([1, 2, 3], None, PinSpec(3, 10.0))
    assert again.pin_id == first.pin_id and again.new_tokens == 0
    assert again.expire_at == first.expire_at + 5
    assert pins.num_pins == 1 and cache.root.pin_ref == 1


def test_bounds_refuse_with_the_reason_and_change_nothing(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, list(range(30)))
    insert(alloc, cache, list(range(100, 110)))
    assert pins.pin(list(range(30)), None, PinSpec(30, 60.0)).pinned
    out = pins.pin(list(range(100, 110)), None, PinSpec(10, 60.0))
    assert not out.pinned and "--max-pinned-fraction" in (out.reason or "")
    assert cache.pinned_size == 30 and pins.num_pins == 1
    pins.clear()
    assert pins.pin(list(range(100, 110)), None, PinSpec(10, 60.0, owner="t")).pinned
    out = pins.pin(list(range(20)), None, PinSpec(20, 60.0, owner="t"))
    assert not out.pinned and "this tenant's limit of 20" in (out.reason or "")
    assert pins.pin(list(range(10)), None, PinSpec(10, 60.0, owner="u")).pinned


def test_two_tenants_cannot_hold_the_whole_pin_budget(setup) -> None:
    alloc, cache, pins, _ = setup  # 32 pinned tokens at most, 20 per tenant
    for base in (0, 100, 200):
        insert(alloc, cache, list(range(base, base + 16)))
    assert pins.pin(list(range(16)), None, PinSpec(16, 60.0, owner="a")).pinned  # 16 free
    out = pins.pin(list(range(100, 116)), None, PinSpec(16, 60.0, owner="b"))
    assert not out.pinned and "leave 0 of the 32" in (out.reason or "")  # b gets what is left
    assert pins.pin(list(range(100, 108)), None, PinSpec(8, 60.0, owner="b")).pinned
    assert cache.pinned_size == 24  # 8 still free: a third tenant gets 4 of them
    assert not pins.pin(list(range(200, 208)), None, PinSpec(8, 60.0, owner="c")).pinned
    assert pins.pin(list(range(200, 204)), None, PinSpec(4, 60.0, owner="c")).pinned


def test_a_named_pin_moved_to_another_prefix_releases_the_old_one(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, [1, 2, 3])
    insert(alloc, cache, [4, 5])
    pins.pin([1, 2, 3], None, PinSpec(3, 60.0, "h"))
    out = pins.pin([4, 5], None, PinSpec(2, 60.0, "h"))
    assert out.pinned and pins.num_pins == 1 and cache.pinned_size == 2


def test_pins_refused_for_prefixes_not_cached_or_empty(setup) -> None:
    alloc, cache, pins, _ = setup
    assert pins.pin([1, 2], None, PinSpec(2, 1.0)).reason == "the prefix is not in the cache"
    assert not pins.pin([1, 2], None, PinSpec(0, 1.0)).pinned
    insert(alloc, cache, [1, 2], "ns")
    assert not pins.pin([1, 2], None, PinSpec(2, 1.0)).pinned  # another namespace
    assert pins.pin([1, 2], "ns", PinSpec(2, 1.0)).pinned


def test_reset_refuses_while_pinned(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, [1, 2])
    pins.pin([1, 2], None, PinSpec(2, 1.0))
    with pytest.raises(RuntimeError, match="pins held"):
        cache.reset()
    insert(alloc, cache, [7])
    with pytest.raises(RuntimeError, match="holds no pin"):
        cache.unpin(cache.match_prefix([7]).last_node)


def test_no_pin_table_says_why() -> None:
    out = NoPinTable().pin([1, 2], None, PinSpec(2, 1.0))
    assert not out.pinned and "--disable-radix-cache" in (out.reason or "")


def test_pinned_tokens_count_once_when_pins_share_a_prefix(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, [1, 2, 3, 4])
    insert(alloc, cache, [1, 2, 5])
    a = pins.pin([1, 2, 3, 4], None, PinSpec(4, 60.0))
    b = pins.pin([1, 2, 5], None, PinSpec(3, 60.0))
    assert (a.new_tokens, b.new_tokens) == (4, 1)
    assert cache.pinned_size == 5
    pins.unpin(a.pin_id)
    assert cache.pinned_size == 3 and cache.evictable_size == 2


def test_an_unpinned_id_is_not_pinned_again(setup) -> None:
    alloc, cache, pins, _ = setup
    insert(alloc, cache, [1, 2, 3])
    assert pins.pin([1, 2, 3], None, PinSpec(3, 60.0, "handle-x")).pinned
    assert pins.unpin("handle-x")
    out = pins.pin([1, 2, 3], None, PinSpec(3, 60.0, "handle-x"))  # a request from before
    assert not out.pinned and out.reason == "the pin was deleted"
    assert not pins.unpin("handle-y")  # dropped by a flush first: refused all the same
    assert not pins.pin([1, 2, 3], None, PinSpec(3, 60.0, "handle-y")).pinned
    assert pins.num_pins == 0 and cache.pinned_size == 0
    assert pins.pin([1, 2, 3], None, PinSpec(3, 60.0, "handle-z")).pinned
    own = pins.pin([1, 2], None, PinSpec(2, 60.0))  # a breakpoint's pin: the prefix's own id
    assert own.pinned and pins.unpin(own.pin_id)
    assert pins.pin([1, 2], None, PinSpec(2, 60.0)).pinned  # a later request pins it again
