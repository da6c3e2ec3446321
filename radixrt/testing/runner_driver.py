"""RunnerDriver: feeds a ModelRunner batches the way the scheduler would, without one.

Used by the GPU checks and their CPU tests to run chosen batches (shared prefixes, mixed
prefill and decode, padded graph batch sizes) straight through ModelRunner.forward_batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.executor.model_runner import ModelRunner
from radixrt.forward_batch import ForwardBatch


@dataclass(slots=True)
class Seq:
    """A request fed by hand: ids[:kv_len] have K/V at req_to_token[row, :kv_len]."""

    row: int
    ids: list[int]
    kv_len: int = 0


class RunnerDriver:
    """Feeds a ModelRunner the way the scheduler does: rows, slots and shared prefixes.

    Slot ownership is simple: every slot and row belongs to the driver until `reset()` frees
    them all at once; a shared prefix's slots are listed in two rows and freed once.
    """

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.reset()

    def reset(self) -> None:
        self.runner.allocator.clear()
        self.runner.req_to_token_pool.clear()

    def add(self, ids: list[int], share: Seq | None = None, shared_len: int = 0) -> Seq:
        """A new request; its first `shared_len` tokens reuse `share`'s cached K/V."""
        seq = Seq(self.runner.req_to_token_pool.alloc(), list(ids))
        if share is not None and shared_len:
            assert share.ids[:shared_len] == ids[:shared_len] and share.kv_len >= shared_len
            # A page holds one owner's tokens: share whole pages only.
            assert shared_len % self.runner.allocator.page_size == 0, "share whole pages"
            table = self.runner.req_to_token_pool.req_to_token
            table[seq.row, :shared_len] = table[share.row, :shared_len]
            seq.kv_len = shared_len
        return seq

    def forward(self, seqs: list[Seq]) -> torch.Tensor:
        """Compute every pending token of `seqs`; (B, vocab) float32 logits of each last one."""
        return self.runner.forward_batch(self.build(seqs))

    def build(self, seqs: list[Seq]) -> ForwardBatch:
        """The batch computing every pending token of `seqs`, with fresh slots for them; the
        caller must run it (their kv_len already counts those tokens)."""
        extend = [len(s.ids) - s.kv_len for s in seqs]
        kv_lens = [s.kv_len for s in seqs]
        pool, start, ids, ends = self.runner.req_to_token_pool, 0, [], []
        last = None
        if self.runner.allocator.page_size > 1:  # paged: each row fills its last page first
            last = pool.last_slots([s.row for s in seqs], kv_lens)
        out_loc = self.runner.allocator.alloc_extend(kv_lens, extend, last)
        for s, e in zip(seqs, extend, strict=True):
            pool.write(s.row, s.kv_len, out_loc[start : start + e])
            ids.extend(s.ids[s.kv_len :])
            start += e
            ends.append(start - 1)
        fb = ForwardBatch.build(
            input_ids=ids,
            out_loc=out_loc,
            req_pool_indices=[s.row for s in seqs],
            prefix_lens=[s.kv_len for s in seqs],
            extend_lens=extend,
            logits_indices=ends,
            req_to_token_pool=pool,
            token_to_kv_pool=self.runner.token_to_kv_pool,
            attn_backend=self.runner.attn_backend,
            device=self.runner.device,
        )
        for s in seqs:
            s.kv_len = len(s.ids)
        return fb
