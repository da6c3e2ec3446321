"""The KV slots of a model's sliding-window layers, when they live in a pool of their own.

A window layer's query at position i reads only keys i - w + 1 .. i, so a token's window-layer
K/V is dead once every query that could read it has run. A model with window layers (Gemma 3:
five of six) then keeps its window layers' K/V in a smaller second pool: each token still has
one slot in the full pool (its "slot", what req_to_token and the radix tree hold), and while
its window K/V lives, one window slot, found through `win_of[slot]` (0: none; the window
layers' padding row). The full allocator attaches a window slot to every slot it hands out
and detaches it when the slot is freed (memory_pool.py), so a freed slot never keeps one.

Window K/V is freed before its token's full K/V, in two ways:
| window K/V of                    | owner           | freed                                  |
|----------------------------------|-----------------|----------------------------------------|
| a running request's own tokens   | the request     | once behind its window (`free_behind`) |
| tokens the radix tree holds      | the tree        | `make_room`, least recently used first, |
|                                  |                 | unless held                            |
A request holds the tree's window K/V its next query reads (`set_hold`, keyed by its
req_to_token row); a pin holds the last window of its prefix (keyed by its pin id). A cached
prefix can be reused only up to a point whose preceding window is all there (`usable_len`).
`NoWindowSlots` is the null object: every layer reads the full pool. The pool itself is
`WindowSlots` (window_slots.py).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Hashable

import torch


class BaseWindowSlots(ABC):
    """Window-layer KV slots paired with the full pool's slots.

    Contract: every slot argument is a (n,) int64 tensor of full-pool slots on the pool's
    device. `attach`/`detach` are called only by the full allocator. Nothing here frees a
    full slot."""

    window: int = 0  # keys a window layer's query sees, itself included; 0: no window pool
    capacity: int = 0  # window slots

    @abstractmethod
    def can_attach(self, n: int) -> bool:
        """Whether n window slots are free now."""

    @abstractmethod
    def attach(self, slots: torch.Tensor) -> None:
        """Give each (just allocated) slot a window slot; OutOfSlotsError if too few are free."""

    @abstractmethod
    def detach(self, slots: torch.Tensor) -> None:
        """Free the window slots of slots being freed (those that still have one)."""

    @abstractmethod
    def usable_len(self, slots: torch.Tensor) -> int:
        """The longest n <= len(slots) such that the window K/V of the tokens a query at
        position n reads (n - window + 1 .. n - 1) all live; len(slots) without a window."""

    @abstractmethod
    def num_available(self) -> int:
        """Window slots free now or freeable by `make_room` (sys.maxsize: no window pool)."""

    @abstractmethod
    def make_room(self, n: int) -> None:
        """Free unheld tree-owned window K/V, least recently used first, until n window slots
        are free; OutOfSlotsError when that is not possible."""

    @abstractmethod
    def set_hold(self, key: Hashable, slots: torch.Tensor) -> None:
        """Hold the window K/V of `slots` (tree-owned) for `key`, replacing what `key` held."""

    @abstractmethod
    def drop_hold(self, key: Hashable) -> None:
        """Release what `key` holds (nothing: no-op)."""

    @abstractmethod
    def free_behind(self, slots: torch.Tensor) -> None:
        """Free the window K/V of a request's own slots that no query reads any more."""

    @abstractmethod
    def adopt(self, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        """Before `ours` (duplicates of the tree's `theirs`, pairwise) are freed: where the
        tree's slot lost its window K/V and ours has it, the tree's slot takes ours."""

    @abstractmethod
    def mark_cached(self, slots: torch.Tensor) -> None:
        """`slots` now belong to the tree: their window K/V may go under `make_room`."""

    @abstractmethod
    def check(self, idle: bool) -> None:
        """AssertionError on a broken invariant; `idle`: no request runs (nothing held by a
        row, every live window slot the tree's)."""


class NoWindowSlots(BaseWindowSlots):
    """No window pool: window layers read the full pool like the others."""

    def can_attach(self, n: int) -> bool:
        return True

    def attach(self, slots: torch.Tensor) -> None:
        pass

    def detach(self, slots: torch.Tensor) -> None:
        pass

    def usable_len(self, slots: torch.Tensor) -> int:
        return int(slots.numel())

    def num_available(self) -> int:
        return sys.maxsize

    def make_room(self, n: int) -> None:
        pass

    def set_hold(self, key: Hashable, slots: torch.Tensor) -> None:
        pass

    def drop_hold(self, key: Hashable) -> None:
        pass

    def free_behind(self, slots: torch.Tensor) -> None:
        pass

    def adopt(self, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        pass

    def mark_cached(self, slots: torch.Tensor) -> None:
        pass

    def check(self, idle: bool) -> None:
        pass
