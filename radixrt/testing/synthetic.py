"""Synthetic KV pools and ForwardBatches with a scattered slot layout, for tests and benchmarks.

Slot ownership here is simple: every request made by `make_batch` owns its row and its slots
until `reset()`, which frees everything at once; nothing is shared with a prefix cache. With
page_size > 1 each request's slots come in whole pages, as PagedSlotAllocator lays them out.
"""

from __future__ import annotations

import torch

from radixrt.attention.base import BaseAttnBackend
from radixrt.cache.memory_pool import ReqToTokenPool, TokenToKVPool
from radixrt.cache.paged_allocator import PagedSlotAllocator
from radixrt.forward_batch import ForwardBatch


class SyntheticPools:
    """A KV pool whose free slots come in a random order, so requests' slots interleave."""

    def __init__(
        self,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity: int,
        max_reqs: int,
        max_context_len: int,
        dtype: torch.dtype,
        device: torch.device | str,
        seed: int = 0,
        page_size: int = 1,
    ) -> None:
        self.device = torch.device(device)
        self.kv = TokenToKVPool(capacity, num_layers, num_kv_heads, head_dim, dtype, self.device,
                                page_size=page_size)  # fmt: skip
        self.pages = PagedSlotAllocator(capacity, page_size, self.device) if page_size > 1 else None
        self.req_to_token = ReqToTokenPool(max_reqs, max_context_len, self.device)
        self.gen = torch.Generator().manual_seed(seed)
        self.reset()

    def reset(self) -> None:
        """Free every row and slot; the next slots come in a fresh random order."""
        self.req_to_token.clear()
        perm = torch.randperm(self.kv.capacity, generator=self.gen) + 1  # slots 1..capacity
        self._free_slots = perm.to(self.device)
        self._next = 0
        if self.pages is not None:  # whole pages, in a random order
            self.pages.clear()
            order = torch.randperm(self.pages.free_pages.numel(), generator=self.gen)
            self.pages.free_pages = self.pages.free_pages[order.to(self.device)]

    def alloc_slots(self, n: int) -> torch.Tensor:
        """(n,) int64 slots on the pool's device, in the pool's random order (a fresh request's
        whole pages when paged)."""
        if self.pages is not None:
            return self.pages.alloc(n)
        if self._next + n > self.kv.capacity:
            raise ValueError(f"synthetic pool of {self.kv.capacity} slots is out of space")
        out = self._free_slots[self._next : self._next + n]
        self._next += n
        return out

    def fill_random(self, slots: torch.Tensor, std: float = 1.0) -> None:
        """Write random K/V (every layer) at `slots`, as if a prefix had been computed there."""
        for buf in (*self.kv.k_buffer, *self.kv.v_buffer):
            values = torch.randn((slots.numel(), *buf.shape[1:]), device=self.device) * std
            buf.index_copy_(0, slots, values.to(buf.dtype))

    def make_batch(
        self,
        prefix_lens: list[int],
        extend_lens: list[int],
        attn_backend: BaseAttnBackend,
        *,
        input_ids: list[int] | None = None,
        vocab_size: int = 32000,
        fill_prefix: bool = True,
    ) -> ForwardBatch:
        """A batch of new requests: request i has a cached prefix of prefix_lens[i] tokens (random
        K/V when `fill_prefix`) and computes extend_lens[i] new tokens (random ids by default).
        Logits are asked for each request's last token."""
        out_locs: list[torch.Tensor] = []
        rows: list[int] = []
        for p, e in zip(prefix_lens, extend_lens, strict=True):
            row = self.req_to_token.alloc()
            slots = self.alloc_slots(p + e)
            self.req_to_token.write(row, 0, slots)
            if fill_prefix and p > 0:
                self.fill_random(slots[:p])
            rows.append(row)
            out_locs.append(slots[p:])
        if input_ids is None:
            input_ids = torch.randint(
                0, vocab_size, (sum(extend_lens),), generator=self.gen
            ).tolist()
        return self._build(
            rows, prefix_lens, extend_lens, input_ids, torch.cat(out_locs), attn_backend
        )

    def decode_batch(
        self,
        rows: list[int],
        seq_lens: list[int],
        input_ids: list[int],
        attn_backend: BaseAttnBackend,
    ) -> ForwardBatch:
        """One more token for requests already in `rows` holding seq_lens[i] tokens each."""
        if self.pages is not None:
            last = self.req_to_token.last_slots(rows, seq_lens)
            out_loc = self.pages.alloc_extend(list(seq_lens), [1] * len(rows), last)
        else:
            out_loc = self.alloc_slots(len(rows))
        for i, (row, n) in enumerate(zip(rows, seq_lens, strict=True)):
            self.req_to_token.write(row, n, out_loc[i : i + 1])
        return self._build(rows, seq_lens, [1] * len(rows), input_ids, out_loc, attn_backend)

    def _build(
        self,
        rows: list[int],
        prefix_lens: list[int],
        extend_lens: list[int],
        input_ids: list[int],
        out_loc: torch.Tensor,
        attn_backend: BaseAttnBackend,
    ) -> ForwardBatch:
        ends = torch.tensor(extend_lens).cumsum(0) - 1  # each request's last new token
        return ForwardBatch.build(
            input_ids=list(input_ids),
            out_loc=out_loc,
            req_pool_indices=rows,
            prefix_lens=list(prefix_lens),
            extend_lens=list(extend_lens),
            logits_indices=ends.tolist(),
            req_to_token_pool=self.req_to_token,
            token_to_kv_pool=self.kv,
            attn_backend=attn_backend,
            device=self.device,
        )
