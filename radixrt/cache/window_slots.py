"""`WindowSlots`: the window layers' own KV pool (the contract and the table of who owns what
are in window_base.py)."""

from __future__ import annotations

from collections.abc import Hashable

import torch

from radixrt.cache.memory_pool import OutOfSlotsError, TokenSlotAllocator
from radixrt.cache.window_base import BaseWindowSlots


class WindowSlots(BaseWindowSlots):
    """Window slots 1..capacity for the slots 1..full_capacity of a page-1 full pool."""

    def __init__(
        self, full_capacity: int, capacity: int, window: int, device: torch.device | str
    ) -> None:
        if window < 1 or capacity < 1:
            raise ValueError(f"a window pool needs window >= 1 and capacity >= 1 "
                             f"(got {window}, {capacity})")  # fmt: skip
        self.window, self.capacity = window, capacity
        self.free_list: TokenSlotAllocator = TokenSlotAllocator(capacity, device)
        n = full_capacity + 1  # slot 0: the padding slot, never attached
        # Per full slot (n,): its window slot (0: none), holds on it, whether the tree owns
        # it, and when it was last cached or held (the logical clock; the LRU order).
        self.win_of = torch.zeros(n, dtype=torch.int64, device=device)
        self.refs = torch.zeros(n, dtype=torch.int32, device=device)
        self.cached = torch.zeros(n, dtype=torch.bool, device=device)
        self.used = torch.zeros(n, dtype=torch.int64, device=device)
        self._clock = 0
        self._holds: dict[Hashable, torch.Tensor] = {}

    def can_attach(self, n: int) -> bool:
        return n <= self.free_list.num_free

    def attach(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self.win_of[slots] = self.free_list.alloc(int(slots.numel()))

    def detach(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._drop(slots)
            self.cached[slots] = False

    def usable_len(self, slots: torch.Tensor) -> int:
        m = int(slots.numel())
        missing = self.win_of[slots] == 0
        if m == 0 or not bool(missing.any()):
            return m
        count = torch.zeros(m + 1, dtype=torch.int64, device=slots.device)
        count[1:] = missing.cumsum(0)  # count[p]: tokens before p without window K/V
        pos = torch.arange(m + 1, device=slots.device)
        ok = count == count[(pos - (self.window - 1)).clamp_(min=0)]
        return int(ok.nonzero()[-1])

    def num_available(self) -> int:
        return self.free_list.num_free + int(self._evictable().sum())

    def make_room(self, n: int) -> None:
        need = n - self.free_list.num_free
        if need <= 0:
            return
        candidates = self._evictable().nonzero().squeeze(1)
        if candidates.numel() < need:
            raise OutOfSlotsError(
                f"need {need} more window KV slots, only {candidates.numel()} can be freed"
            )
        oldest = torch.topk(self.used[candidates], need, largest=False).indices
        self._drop(candidates[oldest])

    def set_hold(self, key: Hashable, slots: torch.Tensor) -> None:
        slots = slots.to(torch.int64)
        self.refs[slots] += 1  # the slots of one hold are distinct
        self.used[slots] = self._tick()
        old = self._holds.pop(key, None)
        if old is not None:
            self.refs[old] -= 1
        self._holds[key] = slots

    def drop_hold(self, key: Hashable) -> None:
        old = self._holds.pop(key, None)
        if old is not None:
            self.refs[old] -= 1

    def free_behind(self, slots: torch.Tensor) -> None:
        self._drop(slots)

    def adopt(self, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        take = (self.win_of[theirs] == 0) & (self.win_of[ours] > 0)
        if bool(take.any()):
            self.win_of[theirs[take]] = self.win_of[ours[take]]
            self.win_of[ours[take]] = 0

    def mark_cached(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self.cached[slots] = True
            self.used[slots] = self._tick()

    def check(self, idle: bool) -> None:
        live = self.win_of[self.win_of > 0]
        assert int(self.win_of[0]) == 0, "the padding slot has a window slot"
        assert live.numel() + self.free_list.num_free == self.capacity, (
            f"window pool leak: {live.numel()} live + {self.free_list.num_free} free "
            f"!= {self.capacity}"
        )
        assert live.unique().numel() == live.numel(), "a window slot serves two slots"
        free = self.free_list.free_slots
        assert not bool(torch.isin(live, free).any()), "a live window slot is also free"
        assert bool((self.refs >= 0).all()), "negative window hold count"
        if idle:
            assert not any(isinstance(k, int) for k in self._holds), "a request row holds"
            rows_free = self.refs.sum() == sum(int(h.numel()) for h in self._holds.values())
            assert bool(rows_free), "window holds out of step with their records"
            assert bool(self.cached[self.win_of > 0].all()), "a live window slot has no owner"

    def _evictable(self) -> torch.Tensor:
        """(n,) bool: tree-owned slots with window K/V that nothing holds."""
        return (self.win_of > 0) & self.cached & (self.refs == 0)

    def _drop(self, slots: torch.Tensor) -> None:
        """Free the window slots of `slots` that have one."""
        w = self.win_of[slots]
        live = w > 0
        if bool(live.any()):
            self.free_list.free(w[live])
            self.win_of[slots[live]] = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock
