"""The window layers' KV pool: pairing with the full allocator, usable prefixes, holds,
least-recently-used eviction, adoption, and a property test against a plain reference.
`check()` runs after every mutating step."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.cache.memory_pool import OutOfSlotsError, TokenSlotAllocator
from radixrt.cache.pins import PinSpec, PinTable
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.window_slots import WindowSlots

FULL, WIN, W = 32, 12, 4


def pool() -> tuple[TokenSlotAllocator, WindowSlots]:
    win = WindowSlots(FULL, WIN, W, "cpu")
    return TokenSlotAllocator(FULL, "cpu", win), win


def t(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int64)


def test_every_allocated_slot_gets_a_window_slot_until_freed() -> None:
    alloc, win = pool()
    a = alloc.alloc(5)
    assert bool((win.win_of[a] > 0).all()) and win.free_list.num_free == WIN - 5
    win.check(idle=False)
    alloc.free(a[:2])
    assert win.free_list.num_free == WIN - 3 and bool((win.win_of[a[:2]] == 0).all())
    with pytest.raises(OutOfSlotsError, match="window"):
        alloc.alloc(WIN - 2)  # 27 full slots are free, 9 window slots
    assert alloc.num_free == FULL - 3  # nothing taken by the refused call
    win.check(idle=False)


def _usable_reference(has: list[bool], w: int) -> int:
    best = 0
    for n in range(len(has) + 1):
        if all(has[max(n - w + 1, 0) : n]):
            best = n
    return best


@given(st.lists(st.booleans(), max_size=40), st.integers(1, 8))
def test_usable_len_is_the_last_point_whose_window_lives(has: list[bool], w: int) -> None:
    win = WindowSlots(64, 64, w, "cpu")
    slots = torch.arange(1, len(has) + 1, dtype=torch.int64)
    win.win_of[slots] = torch.tensor([i + 1 if h else 0 for i, h in enumerate(has)],
                                     dtype=torch.int64)  # fmt: skip
    assert win.usable_len(slots) == _usable_reference(has, w)


def test_make_room_frees_unheld_cached_window_kv_least_recently_used_first() -> None:
    alloc, win = pool()
    a = alloc.alloc(10)
    for s in a[:8]:  # a[8:] stay a request's own
        win.mark_cached(s.view(1))
    win.set_hold(7, a[2:4])  # a row holds two of the tree's
    win.mark_cached(a[:1])  # a[0] used again: now the newest
    assert win.num_available() == 2 + 6  # free + cached, unheld
    win.make_room(2 + 3)  # a[1], a[4], a[5] go: the oldest unheld cached
    assert [int(win.win_of[s]) > 0 for s in a] == [True, False, True, True, False, False, True,
                                                   True, True, True]  # fmt: skip
    with pytest.raises(OutOfSlotsError):
        win.make_room(WIN)
    win.check(idle=False)
    win.drop_hold(7)
    alloc.free(a)
    win.check(idle=True)
    assert win.free_list.num_free == WIN


def test_a_new_hold_replaces_the_old_and_adopt_keeps_the_trees_slot_whole() -> None:
    alloc, win = pool()
    a = alloc.alloc(6)
    win.mark_cached(a)
    win.set_hold("x", a[:3])
    win.set_hold("x", a[2:5])
    assert win.refs[a].tolist() == [0, 0, 1, 1, 1, 0]
    ours, theirs = alloc.alloc(2), a[:2]
    win.free_behind(theirs)  # the tree's lost their window K/V
    win.adopt(ours, theirs)
    assert bool((win.win_of[theirs] > 0).all()) and bool((win.win_of[ours] == 0).all())
    alloc.free(ours)  # only the full slots go: the window slots now serve `theirs`
    win.drop_hold("x")
    alloc.free(a)
    win.check(idle=True)
    assert win.free_list.num_free == WIN and alloc.num_free == FULL


def test_a_pin_holds_the_window_after_its_prefix() -> None:
    alloc, win = pool()
    cache = RadixCache(alloc)
    key = [1, 2, 3, 4, 5, 6]
    slots = alloc.alloc(6)
    cache.insert(key, slots)
    win.mark_cached(slots)
    pins = PinTable(cache, max_tokens=16, max_tokens_per_owner=16)
    assert pins.pin(key, None, PinSpec(6, 60.0, "p")).pinned
    assert win.refs[slots].tolist() == [0, 0, 0, 1, 1, 1]  # positions 3..5: a window of 4
    win.make_room(WIN - 3)  # everything else may go
    assert win.usable_len(slots) == 6 and win.free_list.num_free == WIN - 3
    pins.clear()
    assert int(win.refs.sum()) == 0
    cache.reset()
    win.check(idle=True)
    free_behind_pin = pins.pin(key, None, PinSpec(6, 60.0))
    assert not free_behind_pin.pinned  # gone with the reset


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30)), max_size=40))
def test_random_operations_keep_the_pool_whole(ops: list[tuple[int, int]]) -> None:
    """Allocations, frees, caching, holds, eviction, freeing behind; `check` after each and a
    reference of which slots have window K/V."""
    alloc, win = pool()
    live: list[int] = []  # allocated full slots
    cached: set[int] = set()
    has: dict[int, bool] = {}
    holds: dict[int, list[int]] = {}
    for op, x in ops:
        if op == 0 and win.can_attach(x % 5 + 1) and alloc.num_free >= x % 5 + 1:
            new = alloc.alloc(x % 5 + 1).tolist()
            live += new
            has |= dict.fromkeys(new, True)
        elif op == 1 and live:
            s = live.pop(x % len(live))
            if any(s in h for h in holds.values()):
                live.append(s)  # a held slot is the tree's, kept while held
                continue
            alloc.free(t(s))
            cached.discard(s)
            has[s] = False
        elif op == 2 and live:
            s = live[x % len(live)]
            win.mark_cached(t(s))
            cached.add(s)
        elif op == 3 and cached:
            key = x % 3
            chosen = sorted(cached)[: x % 4]
            win.set_hold(key, t(*chosen))
            holds[key] = chosen
        elif op == 4 and holds:
            key = sorted(holds)[x % len(holds)]
            win.drop_hold(key)
            del holds[key]
        elif op == 5:
            n = x % (WIN + 1)
            held = {s for h in holds.values() for s in h}
            room = win.free_list.num_free + sum(1 for s in cached if has.get(s) and s not in held)
            if n <= room:
                win.make_room(n)
                assert win.free_list.num_free >= n
                for s in held:
                    assert bool(win.win_of[s] > 0) == has[s], "a held slot lost its window K/V"
                has = {s: bool(win.win_of[s] > 0) for s in has}
            else:
                with pytest.raises(OutOfSlotsError):
                    win.make_room(n)
        elif op == 6 and live:
            s = live[x % len(live)]
            if s not in cached:
                win.free_behind(t(s))
                has[s] = False
        win.check(idle=False)
        assert {s for s in live if has.get(s)} == {s for s in live if int(win.win_of[s]) > 0}, (
            "window K/V where the reference has none, or the reverse"
        )
    for key in list(holds):
        win.drop_hold(key)
    if live:
        alloc.free(t(*live))
    win.check(idle=True)
    assert win.free_list.num_free == WIN and alloc.num_free == FULL
