"""DraftModelDrafter: drafts from a second, smaller model of the target's vocabulary, its
greedy continuation, all of a step's drafting requests in one pass per drafted position."""

from __future__ import annotations

import torch

from radixrt.core import Req
from radixrt.executor.draft_runner import DraftRunner
from radixrt.scheduler.speculative.drafter import BaseDrafter


class DraftModelDrafter(BaseDrafter):
    """Proposes the draft model's argmax tokens after each request's fill_ids.

    Exactness: verification (speculation.py) samples every row from the TARGET's distribution
    and accepts a drafted token while it equals the row before's pick. A greedy draft is a
    deterministic function of the tokens so far, so accepting exactly when the target's own
    draw equals it leaves every emitted token distributed as without speculation (greedy: the
    target's argmax, token for token); no draft probabilities are needed, as with lookup drafts.

    Draft K/V (executor/draft_runner.py): the draft model's K/V of a request's position p is
    in the draft buffer's row of the target slot req_to_token[row, p], so the shared allocator
    and radix tree carry it with the target's: a cached prefix has the draft K/V of whoever
    computed its slots. `req.draft_kv_len` says how many positions hold it. Each step first
    computes the missing ones up to and including the last token (catch-up, as one extend with
    the first drafted position), then one decode pass per further drafted position.

    Ownership: catch-up writes only the draft rows of slots below kv_len (the request's own or
    the tree's, locked by it; rewriting a shared slot writes what its tokens give anyway). The
    drafted positions, kv_len onwards, use the request's scratch rows of this pass (no slot of
    the pool is taken or freed here; their target slots come in alloc_for as with any draft),
    so after drafting draft_kv_len == kv_len, and the next catch-up computes the tokens kept.

    Invariant: a draft K/V entry that is stale (a slot computed by the target alone, a prefix
    reloaded from a lower tier, a slot swapped for the tree's duplicate) can only make drafts
    worse, never outputs different: every drafted token is checked against the target.
    """

    def __init__(self, runner: DraftRunner, req_to_token: torch.Tensor) -> None:
        self.runner = runner
        self.req_to_token = req_to_token  # the target's (max_reqs, max_len) int32 table

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        return self.propose_batch([req], [max_tokens])[0]

    @torch.inference_mode()
    def propose_batch(self, reqs: list[Req], max_tokens: list[int]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in reqs]
        idx = [i for i, n in enumerate(max_tokens) if n > 0]
        if not idx:
            return drafts
        group = [reqs[i] for i in idx]
        budgets = [min(max_tokens[i], self.runner.scratch_per_req) for i in idx]
        table = self._table(group, budgets)
        starts = [min(r.draft_kv_len, r.kv_len) for r in group]
        ids: list[int] = []
        for r, lo in zip(group, starts):
            ids.extend(r.fill_ids[lo : r.kv_len + 1])  # catch-up through the last token
        out_loc = torch.cat([table[i, lo : r.kv_len + 1] for i, (r, lo) in
                             enumerate(zip(group, starts))])  # fmt: skip
        extend = [r.kv_len + 1 - lo for r, lo in zip(group, starts)]
        picks = self.runner.forward(table, ids, out_loc, starts, extend).argmax(-1).tolist()
        for r in group:
            r.draft_kv_len = r.kv_len
        out = [[t] for t in picks]
        for j in range(1, max(budgets)):  # position kv_len + j: one row per request
            live = [i for i, b in enumerate(budgets) if b > j]
            pos = [group[i].kv_len + j for i in live]
            sub = table[live]
            at = torch.tensor(pos, device=sub.device)
            loc = sub[torch.arange(len(live), device=sub.device), at]  # scratch rows
            logits = self.runner.forward(sub, [out[i][-1] for i in live], loc, pos,
                                         [1] * len(live))  # fmt: skip
            for i, t in zip(live, logits.argmax(-1).tolist()):
                out[i].append(t)
        for i, tokens in zip(idx, out):
            drafts[i] = tokens
        return drafts

    def _table(self, group: list[Req], budgets: list[int]) -> torch.Tensor:
        """(B, L) int32: each request's slots below kv_len, then its scratch rows for the
        positions it drafts (kv_len .. kv_len + budget - 1)."""
        width = max(r.kv_len + b for r, b in zip(group, budgets))
        rows = torch.tensor([r.req_pool_idx for r in group], device=self.req_to_token.device)
        table = self.req_to_token[rows, :width].clone()
        for i, (r, b) in enumerate(zip(group, budgets)):
            table[i, r.kv_len : r.kv_len + b] = self.runner.scratch(i)[:b]
        return table
