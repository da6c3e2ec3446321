"""Speculation: drafts for decoding requests before a step, and after it the longest drafted
prefix the model agrees with, plus one token of its own, kept.

A speculating request computes 1 + k tokens in the step's forward pass next to the other
requests': its last sampled token and the k drafted ones, with logits at every position.
Where the attention backend decodes rows of one request (CPU kernels, torch_native), they are
one decode row per token (forward_batch.split_short_extends), in a decode pass or beside the
step's prefills: row j attends over the request's slots up to its own position with the
arithmetic of a decode step, so a verifying step stays on the decode path; otherwise the
request runs as an extend.

Row j's pick is what a decode step after the first j drafted tokens would sample (greedy:
its argmax; sampled: a draw from its distribution, rows.py says why that is exact), so the
drafted tokens are accepted while they equal the row before's pick; the picks are emitted
one at a time through the finish check, so a stop token, stop string, max_new_tokens or the
context length ends the output exactly where one-token steps would.

Grammars: a constrained request's draft is cut to its longest prefix the grammar allows
(within the token budget), and row j is sampled under the mask a decode step would use after
the first j drafted tokens (GrammarState.along walks the matcher there and back). Emitted
picks advance the grammar one by one; jump-forward runs only after the last of them, as it
would after a one-token step. A request whose last pick made the grammar force tokens
(jump-forward appended them to its output, uncomputed; at most MAX_FORCED) drafts after them
in the same step (`drafts_after_forced`, lookup drafters): the step computes the forced
tokens' rows first (`rows.forced_rows`, no logits: they are certain, the matcher is past them)
and then the verifying rows, the first of them at the last forced token, as a decode step
would after a one-token step that had computed them.

Drafts after a prompt (`plan_prompt_ends`, lookup drafts on a pass that decodes a request's
rows): a request whose step computes the rest of its prompt may verify a draft in that same
pass, its first verifying row the prompt's last token (the rows before it are the prompt's
extend, rows.forced_rows counts them as it counts forced tokens). The prompt stays one extend
and the draft's rows are decode rows of the same request (forward_batch.split_short_extends),
so every emitted token is what a decode step after the prompt would pick. Only a draft the
drafter trusts (a long match: an agent's turn that begins as its earlier turns did, a prompt
answered before) is verified there, and its acceptance is counted apart
(DraftDepth.after_prompts), so a prompt's guess at its answer moves no decoding request's
rate. The prompt is cached once verified (up to its last token, as a prefill's is).

Draft slot ownership: `alloc_for` gives the request slots for all 1 + k positions, like any
extend, written into its own req_to_token row (they are the request's, whether the pass
runs them as decode rows or an extend; the rows only read that table). After verification
the positions holding tokens of its output stay (kv_len moves past them); the slots of the
rejected ones are freed in `_accept`, in the same step, so the pool is whole after every
step and no draft slot outlives it.

Draft trees (`branches` > 1; lookup drafts on a backend that decodes rows of one request, one
slot per page, requests neither constrained nor seeded): the drafter's alternatives merged
into one tree of up to `tree_nodes` nodes, every node a decode row attending over the prefix
and its own path (tree_rows.py: which rows, and who owns what), positions by depth. The pick
at node 0 is emitted; while a child of the current node drafted the pick, it moves there and
emits that node's pick (every emitted token is still a draw of the target at its position:
rows.py's argument, each node's row seeing its own path as output).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.core import Req
from radixrt.core.forward_batch import prompt_tokens_of
from radixrt.executor.sampler import SampleOutput, Sampler
from radixrt.scheduler.grammar_queue import GrammarQueue, NoGrammarQueue
from radixrt.scheduler.picks import append_pick
from radixrt.scheduler.speculative.draft_depth import DraftDepth
from radixrt.scheduler.speculative.draft_masks import DraftMasks
from radixrt.scheduler.speculative.drafter import ALTERNATIVES, BaseDrafter, can_speculate
from radixrt.scheduler.speculative.guard import DraftGuard
from radixrt.scheduler.speculative.prediction import PREDICTION_DRAFT_TOKENS, PredictedDrafter
from radixrt.scheduler.speculative.rows import SeededDraws, forced_rows, row_reqs
from radixrt.scheduler.speculative.tally import tally
from radixrt.scheduler.speculative.tree import chain_path
from radixrt.scheduler.speculative.tree_rows import TreeRows
from radixrt.scheduler.stats import SchedulerStats

# check_finish(req, jump): the scheduler's finish check and grammar advance; `jump` lets
# jump-forward append forced tokens after this token.
CheckFinish = Callable[[Req, bool], None]
# The most forced tokens a request drafts after (`drafts_after_forced`): with a draft, its
# step's rows stay within a decode pass's rows per request (MAX_ROWS_PER_REQUEST).
MAX_FORCED = 8


class Speculation:
    """Plans drafts within spare KV slots and verifies them; with `num_draft_tokens` 0 (or a
    NoDrafter) it drafts nothing and every step is as without speculation."""

    def __init__(self, drafter: BaseDrafter, num_draft_tokens: int, kv: KVCacheManager,
                 sampler: Sampler, context_len: int, stats: SchedulerStats,
                 check_finish: CheckFinish, grammar: GrammarQueue | None = None,
                 branches: int = 1, tree_nodes: int = 0,
                 depths: DraftDepth | None = None,
                 max_rows: int | None = None,
                 predictions: bool = False) -> None:  # fmt: skip
        self.drafter = drafter  # the configured drafter (NoDrafter: speculation off)
        self._source = PredictedDrafter(drafter)
        # The most tokens a request with a predicted output drafts per step (0: predictions
        # are not drafted from); requests without one draft num_draft_tokens at most.
        most = max(num_draft_tokens, PREDICTION_DRAFT_TOKENS)
        self.prediction_tokens = most if predictions else 0
        # The most rows a request's step may compute, its draft included (None: no limit).
        self.max_rows = max_rows
        self.branches = branches  # the most leaves of a draft tree; 1: chains only
        self.tree_nodes = tree_nodes or 2 * num_draft_tokens  # the most nodes of a tree
        self.tree_rows = TreeRows(kv)
        self.num_draft_tokens = num_draft_tokens
        self.kv = kv
        self.sampler = sampler
        # The last position a request may compute: the context and its req_to_token row.
        self.max_len = min(context_len, kv.req_to_token_pool.req_to_token.shape[1])
        self.stats = stats
        self.check_finish = check_finish  # guarded: a fault finishes that request alone
        self.grammar = grammar or NoGrammarQueue()
        # The masks along this step's drafts of constrained requests: set by plan, read and
        # cleared by verify.
        self.masks = DraftMasks(self.grammar, sampler.eos_token_ids)
        # How deep each draft pays: the measured row cost against acceptance (draft_depth.py;
        # None: a CPU's, adaptive).
        self.depths = depths or DraftDepth()

    @property
    def source(self) -> PredictedDrafter:
        """What a step's drafts come from: a request's predicted output, then `drafter`."""
        if self._source.inner is not self.drafter:  # (a drafter swapped in since)
            self._source = PredictedDrafter(self.drafter)
        return self._source

    def observe(self, rows: int, sampled: int, seconds: float) -> None:
        """A forward pass of `rows` rows, `sampled` of them sampled, took `seconds`."""
        if self.num_draft_tokens > 0 or self.prediction_tokens > 0:
            self.depths.observe(rows, sampled, seconds)

    def drafts_after_forced(self, req: Req) -> bool:
        """Whether `req`, whose output ends in tokens jump-forward appended (forced by its
        grammar, not computed yet), decodes this step with a draft after them rather than
        computing them alone like a prefill chunk: a lookup drafter, a grammar that allows
        drafts, at most MAX_FORCED of them after a computed prompt."""
        forced = forced_rows(req)
        return (self.limit(req) > 0 and self.source.trusts(req)
                and req.grammar is not None and 0 < forced <= MAX_FORCED
                and req.kv_len >= req.prompt_len and self.grammar.speculates(req))  # fmt: skip

    def plan(self, decoding: list[Req], spare: int) -> int:
        """Draft for the eligible of `decoding` (each set to extend its uncomputed tokens: 1,
        or its forced tokens and the last pick) using at most `spare` KV slots beyond their
        step's, all asked of the drafter at once (a draft model drafts them in one pass per
        position); the drafts are cut to the tokens the step verifies (DraftDepth.allot: the
        likeliest to be kept, as many as raise its expected tokens per second on the measured
        pass times), a constrained one to what its grammar allows (another occurrence's chain
        where that goes further); sets draft_ids and extend_len and returns the slots taken.
        The first plan of a step."""
        if not any(self.limit(r) > 0 for r in decoding):
            return 0
        self.masks.clear()
        self.tree_rows.release()  # rows a pass that raised left borrowed, if any
        return self._plan(decoding, spare, after_prompts=False)

    def plan_prompt_ends(self, ending: list[Req], spare: int) -> int:
        """Draft after the prompts that `ending` (requests whose step computes the rest of
        their prompt, nothing of their output yet) complete this step, within `spare` slots:
        the step verifies the draft in the prompt's own pass, its first verifying row the
        prompt's last token, so the first output tokens need no pass of their own. Lookup
        drafts only (a draft model has not read the prompt yet), chains, on a pass that runs
        a request's output rows as decode rows (max_rows), so each token computes what a
        decode step would; only a draft the drafter trusts (a long match: the turn of an
        agent that begins as its earlier turns did, a prompt answered before), so guesses
        neither cost rows nor lower the request's acceptance before its first token. After
        `plan`, in the same step; returns the slots taken."""
        ending = [r for r in ending if self.limit(r) > 0 and self.source.trusts(r)]
        if not ending or self.max_rows is None:
            return 0
        return self._plan(ending, spare, after_prompts=True)

    def limit(self, req: Req) -> int:
        """The most tokens `req` may draft in a step (0: it does not speculate)."""
        if self.prediction_tokens and req.sampling_params.prediction_ids:
            return self.prediction_tokens
        return self.num_draft_tokens

    def _plan(self, decoding: list[Req], spare: int, after_prompts: bool) -> int:
        """`plan` for `decoding`; `after_prompts`: they end their prompts (chains only, and
        trusted drafts only)."""
        reqs: list[Req] = []
        budgets: list[int] = []
        caps: list[int] = []  # each chain's guard length (the drafter may trust more)
        # What the configured drafter may draft where a request's prediction has no draft:
        # as without a prediction (a draft model pays a pass per token).
        inner: list[int] = []
        trees: list[tuple[Req, int, int]] = []  # (request, depth, nodes) of tree drafts
        used = 0  # slots the budgets so far may take (each draft as long as its budget)
        # A draft row pays when its token is kept with at least this probability (step_cost.py).
        bar = self.depths.bar(decoding)
        for req in decoding:
            limit = self.limit(req)
            if limit <= 0 or not (can_speculate(req) or self.grammar.speculates(req)):
                continue
            if req.draft_guard is None:
                req.draft_guard = DraftGuard(limit)
            own = req.extend_len  # the step's tokens without a draft
            most = self._room(req, own - prompt_tokens_of(req.prompt_len, req.kv_len, own))
            cap = req.draft_guard.allowed()  # the guard: recent acceptance (0: paused)
            if most <= 0:
                continue
            base = self.kv.slots_needed(req, own)
            fit = self.kv.tokens_fitting(req, base + spare - used) - own
            budget = min(most, cap, fit, self.depths.depth(req, False, bar, most))
            if budget > 0 and not after_prompts and self._tree_ok(req):
                # Side branches in proportion to the depth that pays.
                nodes = max(budget, min(self.tree_nodes * budget // limit, fit))
                if self.max_rows is not None:
                    nodes = min(nodes, self.max_rows - own)
                trees.append((req, budget, nodes))
                used += self.kv.slots_needed(req, 1 + nodes) - base
            elif (ask := min(most, fit) if self.source.trusts(req) else budget) > 0:
                reqs.append(req)  # a chain: as long as a trusted draft may be
                budgets.append(ask)
                caps.append(cap)
                k = min(self.num_draft_tokens, most)
                inner.append(min(k, fit) if self.drafter.trusts(req) else min(k, budget))
                used += self.kv.slots_needed(req, own + budgets[-1]) - base
        used = sum(self._plan_tree(req, depth, nodes) for req, depth, nodes in trees)
        drafts = self.source.propose_batch(reqs, budgets, inner)
        chains: list[tuple[float, int, float]] = []  # (rate, length, mask s/token) of each
        stats = self.grammar.stats  # a constrained draft's tokens each cost a grammar mask
        mask_s = stats.mask_time_s / stats.num_masks if stats.num_masks else 0.0
        for i, (req, budget, cap) in enumerate(zip(reqs, budgets, caps)):
            trusted = self.source.trusted(req)
            drafts[i] = self.source.trim(req, drafts[i][:budget], cap)
            if after_prompts and not trusted:
                drafts[i] = []
            assert isinstance(req.draft_guard, DraftGuard)
            req.draft_guard.trusted = trusted
            extra = mask_s if req.grammar is not None else 0.0
            # A prediction's drafts are priced on the request's own acceptance (the engine's
            # trusted rate its prior), after its prompt as after any token.
            if after_prompts and not req.draft_predicted:
                rate = self.depths.after_prompt_rate()
            else:
                rate = self.depths.rate(req, trusted)
            chains.append((rate, len(drafts[i]), extra))
        # The step's rows so far: every decoding request's own, trees' drafts included.
        depths = self.depths.allot(len(decoding), sum(r.extend_len for r in decoding), chains)
        for req, draft, depth in zip(reqs, drafts, depths):
            draft = draft[:depth]
            if draft and req.grammar is not None:
                more = functools.partial(self.source.alternatives, req, len(draft), ALTERNATIVES)
                draft = self.masks.constrain(req, draft, more)
            if not draft:
                req.draft_predicted = False  # (nothing of it verified this step)
            if draft:
                own = req.extend_len
                req.draft_ids = draft
                req.extend_len = own + len(draft)
                used += self.kv.slots_needed(req, req.extend_len) - self.kv.slots_needed(req, own)
        return used

    def _tree_ok(self, req: Req) -> bool:
        """Whether `req` may draft a tree this step (else a chain)."""
        p = req.sampling_params
        return (self.branches > 1 and req.grammar is None and can_speculate(req)
                and not req.sampling_params.prediction_ids
                and (p.seed is None or p.is_greedy) and self.tree_rows.spare() > 0
                and req.draft_guard is not None and req.draft_guard.trees_allowed())  # fmt: skip

    def _plan_tree(self, req: Req, depth: int, nodes: int) -> int:
        """Draft a tree for `req` (its first branch alone where rows are short); returns the
        slots beyond its decode step's it takes."""
        assert isinstance(req.draft_guard, DraftGuard)
        req.draft_guard.trusted = False  # a tree's nodes count as guesses
        tree = self.source.propose_tree(req, depth, nodes, self.branches)
        draft = tree.tokens
        if not tree.is_chain and len(tree.leaves()) - 1 <= self.tree_rows.spare():
            self.tree_rows.reserve(req, tree)
            req.draft_parents = tree.parents
        elif not tree.is_chain:  # its first branch: nodes 1..m, a chain
            draft = tree.tokens[: tree.leaves()[0]]
        if not draft:
            return 0
        req.draft_ids = draft
        req.extend_len = 1 + len(draft)
        return self.kv.slots_needed(req, req.extend_len) - self.kv.slots_needed(req, 1)

    def lay_out(self) -> None:
        """After the step's slots are allocated: the rows its draft trees attend through."""
        self.tree_rows.lay_out()

    def _room(self, req: Req, own: int) -> int:
        """The most tokens worth drafting for `req`, whose step computes `own` rows of output
        tokens without a draft (its prompt tokens are an extend): all but the bonus token of
        what is left of max_new_tokens, within the context and the rows a step may compute
        for it."""
        left = req.sampling_params.max_new_tokens - len(req.output_ids) - 1
        most = min(self.limit(req), left, self.max_len - req.seq_len)
        return most if self.max_rows is None else min(most, self.max_rows - own)

    def verify(self, items: list[tuple[Req, int]], logits: torch.Tensor) -> list[Req]:
        """For each (request, first logits row) that speculated: sample its rows, accept,
        emit, free the rejected slots; returns the requests (the caller retires the
        finished)."""
        rows = [i for req, start in items for i in range(start, start + 1 + len(req.draft_ids))]
        seeded = SeededDraws([req for req, _ in items], logits.device)  # before the rows
        reqs = [row for req, _ in items for row in row_reqs(req)]
        out = self.sampler.sample(
            logits[rows], reqs, self.masks.vocab_mask([req for req, _ in items], len(rows))
        )
        now, i = time.monotonic(), 0
        for req, _ in items:
            n = 1 + len(req.draft_ids)  # its verifying rows
            emitted = self._accept(req, out, i, now)
            seeded.settle(req, emitted)
            i += n
        self.tree_rows.release()
        return [req for req, _ in items]

    def _accept(self, req: Req, out: SampleOutput, first: int, now: float) -> int:
        """Emit the picks of rows first.. along the drafts they accept (a chain: while they
        equal the drafts; a tree: DraftTree.accept) and the first that is not drafted;
        returns the tokens emitted."""
        # Positions kv_len .. start - 1 hold the forced tokens (computed, kept); the verifying
        # rows are positions start .. end - 1.
        draft, start, end = (
            req.draft_ids,
            req.kv_len + forced_rows(req),
            req.kv_len + req.extend_len,
        )
        picks = out.next_token_ids[first : first + 1 + len(draft)]
        tree = self.tree_rows.tree_of(req)
        path = tree.accept(picks) if tree is not None else chain_path(draft, picks)
        emitted = 0
        for j, node in enumerate(path):
            if req.is_finished or not append_pick(req, out, first + node):  # its own row's
                break
            emitted += 1
            self.check_finish(req, j == len(path) - 1)  # jump-forward after the last only
        req.first_token_time = req.first_token_time or now
        accepted = min(len(path) - 1, emitted)
        after_prompt = self.depths.after_prompts if req.kv_len < req.prompt_len else None
        tally(self.stats, self.depths.rates, req, tree, accepted, emitted, path, after_prompt)
        # Position start + i computed node path[i] (its K/V in that node's slot); for
        # i < emitted it is a token of the output now, the other nodes were rejected.
        keep = max(emitted, 1)
        if tree is not None:
            self.tree_rows.accept(req, path[:keep])
        else:
            self._free_positions(req, start + keep, end)
        req.kv_len = start + keep
        req.draft_ids, req.draft_parents = [], []
        req.draft_predicted = False
        self.kv.advance_window(req)
        return emitted

    def _free_positions(self, req: Req, lo: int, hi: int) -> None:
        """Free the slots of positions [lo, hi) of `req`, which it owns: with pages, only the
        whole pages past position lo (the partly used last page stays the request's, as
        after any step)."""
        p = self.kv.page_size
        lo = -(-lo // p) * p
        if lo >= hi:
            return
        row = req.req_pool_idx
        assert row is not None
        slots = self.kv.req_to_token_pool.req_to_token[row, lo:hi].to(torch.int64)
        self.kv.allocator.free(slots)
