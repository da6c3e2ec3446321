"""KV memory: the token-slot pool (K/V per layer), its slot allocator, and req_to_token.

Slot 0 of the KV pool is a padding slot that is never allocated; usable slots are
1..capacity. With pages of P > 1 slots (paged_allocator.py) the whole first page, slots
0..P-1, is padding and the usable slots are P..capacity+P-1. Ownership of a slot is tracked
outside this file (by the request that allocated it, then by the prefix cache); the
allocator only knows free vs not free. A model whose sliding-window layers keep their K/V in
a pool of their own (window_base.py) gets a window slot with every slot: the allocator
attaches it in `alloc` and detaches it in `free`, and the KV pool stores and reads those
layers through the slot's window slot.
"""

from __future__ import annotations

import torch

from radixrt.cache.kv_layout import bytes_per_head_row, row_width, to_rows, write_rows
from radixrt.cache.window_base import BaseWindowSlots, NoWindowSlots


class OutOfSlotsError(RuntimeError):
    """Raised when more KV slots are asked for than are free."""


class TokenToKVPool:
    """Per-layer K and V buffers, each (capacity + page_size, num_kv_heads, W) of `dtype`, W
    the head dim, or for fp8 the head dim + 4: each (slot, head) row's float32 scale follows
    its bytes (kv_layout.py), so a token of an fp8 pool takes 2 x layers x heads x (D + 4) bytes.

    Slot s lies in page s // page_size; page 0 is padding, so `capacity` must be a multiple of
    page_size and every page is whole. With a window pool (`window` a WindowSlots), the layers
    in `window_layers` have buffers of (window.capacity + 1, ...) rows instead, indexed by
    window slot: `set_kv_buffer` translates slots itself, readers translate through
    `slot_map(layer_id)`.
    """

    def __init__(
        self,
        capacity: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        page_size: int = 1,
        window_layers: tuple[int, ...] = (),
        window: BaseWindowSlots | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"KV pool capacity must be >= 1 token, got {capacity}")
        if page_size < 1 or capacity % page_size:
            raise ValueError(f"KV pool capacity {capacity} is not a whole number of "
                             f"{page_size}-slot pages")  # fmt: skip
        self.capacity = capacity
        self.page_size = page_size
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.row_width = row_width(head_dim, dtype)  # a (slot, head) row's last dim
        self.device = torch.device(device)
        self.window = window or NoWindowSlots()
        self.window_layers = frozenset(window_layers) if self.window.window else frozenset()
        # (rows,) per layer: the full pool's, or the window pool's for a window layer.
        self.rows = [
            self.window.capacity + 1 if i in self.window_layers else capacity + page_size
            for i in range(num_layers)
        ]
        # torch.empty: pages are only touched when written, so a large CPU pool is cheap.
        self.k_buffer = [self._buffer(n) for n in self.rows]
        self.v_buffer = [self._buffer(n) for n in self.rows]
        for buf in (*self.k_buffer, *self.v_buffer):
            buf[:page_size].zero_()  # padding page: finite values for masked-out reads

    def _buffer(self, rows: int) -> torch.Tensor:
        return torch.empty((rows, self.num_kv_heads, self.row_width), dtype=self.dtype,
                           device=self.device)  # fmt: skip

    @staticmethod
    def bytes_per_token(
        num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        return 2 * num_layers * num_kv_heads * bytes_per_head_row(head_dim, dtype)

    @property
    def size_bytes(self) -> int:
        per_row = self.bytes_per_token(1, self.num_kv_heads, self.head_dim, self.dtype)
        return sum(self.rows) * per_row

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's K and V buffers; a window layer's are indexed by `slot_map` first."""
        return self.k_buffer[layer_id], self.v_buffer[layer_id]

    def slot_map(self, layer_id: int) -> torch.Tensor | None:
        """For a layer in the window pool: (capacity + 1,) int64, slot -> its row in the
        layer's buffers (0, the padding row, for a slot without window K/V); None: the layer
        is indexed by slot."""
        return self.window.win_of if layer_id in self.window_layers else None  # type: ignore[attr-defined]

    def set_kv_buffer(
        self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Write k, v of shape (num_tokens, num_kv_heads, head_dim) at slots `loc` (num_tokens,),
        rounded to the pool's dtype (fp8: scaled per row, kv_layout.to_rows)."""
        # index_copy_ rather than `buf[loc] = k`: advanced-index assignment on CPU costs
        # milliseconds on a large buffer, index_copy_ microseconds.
        slot_map = self.slot_map(layer_id)
        if slot_map is not None:
            loc = slot_map.index_select(0, loc)
        write_rows(self.k_buffer[layer_id], loc, to_rows(k, self.dtype))
        write_rows(self.v_buffer[layer_id], loc, to_rows(v, self.dtype))


class TokenSlotAllocator:
    """Free list of KV slots 1..capacity. `alloc`, `alloc_extend` and `free` are the only
    mutators. Any slot serves any token: a page of one slot. `window` pairs each allocated
    slot with a window slot (window_base.py; NoWindowSlots: none)."""

    page_size = 1

    def __init__(
        self,
        capacity: int,
        device: torch.device | str = "cpu",
        window: BaseWindowSlots | None = None,
    ) -> None:
        self.capacity = capacity
        self.device = torch.device(device)
        self.window = window or NoWindowSlots()
        self.clear()

    def clear(self) -> None:
        # (num_free,) int64 on the pool's device; order is allocation order.
        self._free = torch.arange(1, self.capacity + 1, dtype=torch.int64, device=self.device)

    @property
    def free_slots(self) -> torch.Tensor:
        """(num_free,) int64: the free slots, in allocation order (read-only)."""
        return self._free

    @property
    def num_free(self) -> int:
        return int(self._free.numel())

    @property
    def max_slot(self) -> int:
        """The largest slot index this allocator hands out."""
        return self.capacity

    def can_alloc(self, n: int) -> bool:
        return n <= self.num_free

    def slots_needed(self, kv_len: int, n: int) -> int:
        """Free slots consumed by extending a request that holds kv_len tokens by n tokens."""
        return n

    def alloc(self, n: int) -> torch.Tensor:
        """Return (n,) int64 slot indices now owned by the caller; raise OutOfSlotsError."""
        if n > self.num_free:
            raise OutOfSlotsError(f"asked for {n} KV slots but only {self.num_free} are free")
        if not self.window.can_attach(n):
            raise OutOfSlotsError(f"asked for {n} KV slots but too few window slots are free")
        out = self._free[:n]
        self._free = self._free[n:]
        self.window.attach(out)
        return out

    def alloc_extend(
        self, kv_lens: list[int], extend_lens: list[int], last_slots: torch.Tensor | None
    ) -> torch.Tensor:
        """Slots for request b's next extend_lens[b] tokens, concatenated in batch order:
        (sum(extend_lens),) int64. kv_lens and last_slots (each request's slot of token
        kv_len-1, any value when kv_len == 0) matter only to paged allocators."""
        return self.alloc(sum(extend_lens))

    def free(self, slots: torch.Tensor) -> None:
        """Give back slots the caller owned. Freeing a slot twice corrupts the pool."""
        if slots.numel() == 0:
            return
        self.window.detach(slots.to(torch.int64))
        self._free = torch.cat([self._free, slots.to(self._free)])


class ReqToTokenPool:
    """Rows of `req_to_token` (max_reqs, max_context_len) int32: each running request's slots.

    Row r, column i holds the KV slot of token i of the request that holds row r.
    """

    def __init__(self, max_reqs: int, max_context_len: int, device: torch.device | str) -> None:
        self.max_reqs = max_reqs
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros(
            (max_reqs, max_context_len), dtype=torch.int32, device=device
        )
        self._free_rows = list(range(max_reqs))

    @property
    def num_free(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int:
        if not self._free_rows:
            raise OutOfSlotsError(f"all {self.max_reqs} request rows are in use")
        return self._free_rows.pop()

    def free(self, row: int) -> None:
        self._free_rows.append(row)

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        """Record `slots` (n,) as the KV slots of tokens start..start+n of row `row`."""
        self.req_to_token[row, start : start + slots.numel()] = slots.to(torch.int32)

    def clear(self) -> None:
        self._free_rows = list(range(self.max_reqs))

    def last_slots(self, rows: list[int], kv_lens: list[int]) -> torch.Tensor:
        """(B,) int32 on the pool's device: the slot of token kv_lens[b]-1 of row rows[b]
        (column 0 where kv_lens[b] == 0). What a paged allocator continues from."""
        dev = self.req_to_token.device
        r = torch.tensor(rows, dtype=torch.int64).to(dev)
        c = torch.tensor([max(k - 1, 0) for k in kv_lens], dtype=torch.int64).to(dev)
        return self.req_to_token[r, c]
