"""Speculative decoding by lookup: drafts from the prefix cache and the request's own tokens,
verified in the step's forward pass (speculation.py says how, and who owns the draft slots;
rows.py why sampled requests keep their exact distribution, and seeded ones their tokens).

Drafts come from a `LookupDrafter`, or with --speculative-draft-model from a second model
(draft_model.py: `DraftModelDrafter`, its K/V beside the target's in the same slots). How
long a draft may be: the request's guard (guard.py: shorter after rejections, pauses), the
rows a decode pass runs per request (MAX_ROWS_PER_REQUEST, where passes decode a request's
rows), and the step's allotment (draft_depth.py): the drafted tokens most likely to be
accepted (acceptance.py), as many as raise the step's expected tokens per second on the
measured pass times (step_cost.py). A request that ends its prompt in a step may verify a
trusted lookup draft in that same pass (Speculation.plan_prompt_ends), so an agent's turn
that begins as its earlier turns did gets those tokens with its first.

Speculated: requests without a grammar (drafter.can_speculate) and constrained ones whose
matcher rolls back (GrammarQueue.speculates: both backends; not seeded sampling under
jump-forward); the rest decode one token per step in the same batch. Draft trees: lookup
drafts only, on the CPU (tree.py, tree_rows.py). Models with sliding-window layers speculate
as the others do, window pool or not: a draft's slots get window slots when allocated (the
allocator attaches them, `available_size` counts them) and lose them when a rejected
position is freed, `KVCacheManager.advance_window` moves the request's window after each
verification, and every verifying row reads the window behind its own position (a tree
node's: its depth). Not yet: CUDA graphs for batches that verify drafts.
"""

from __future__ import annotations

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.core.config import SchedulerConfig
from radixrt.core.forward_batch import MAX_ROWS_PER_REQUEST
from radixrt.executor.sampler import Sampler
from radixrt.scheduler.grammar_queue import GrammarQueue
from radixrt.scheduler.speculative.draft_depth import DraftDepth
from radixrt.scheduler.speculative.drafter import BaseDrafter, LookupDrafter, NoDrafter
from radixrt.scheduler.speculative.keyed import TokenTexts
from radixrt.scheduler.speculative.speculation import CheckFinish, Speculation
from radixrt.scheduler.stats import SchedulerStats

__all__ = [
    "BaseDrafter",
    "LookupDrafter",
    "NoDrafter",
    "Speculation",
    "TokenTexts",
    "build_speculation",
    "decodes_rows",
]


def build_speculation(config: SchedulerConfig, kv: KVCacheManager, sampler: Sampler,
                      context_len: int, stats: SchedulerStats,
                      check_finish: CheckFinish, grammar: GrammarQueue | None = None,
                      drafter: BaseDrafter | None = None,
                      rows: bool = False,
                      texts: TokenTexts | None = None,
                      device_type: str = "cpu") -> Speculation:  # fmt: skip
    """The configured speculation: when speculative_num_draft_tokens > 0, `drafter` (a draft
    model's, made where the runner is) or else lookup drafts; otherwise none. Lookup drafts
    branch into trees (up to speculative_tree_branches leaves) when `rows` (the pass decodes
    rows of one request on the CPU: cpu or torch_native attention) and slots are not paged;
    else chains. With the tokenizer's `texts`, lookup drafts also key on the prompt's words
    (keyed.py). Whatever the drafter, a request's predicted output drafts first, speculation
    on or off, where passes decode a request's rows (`rows`: CPU attention; on a GPU a
    verifying request runs as an extend, not yet checked against decode steps there;
    prediction.py)."""
    k = config.speculative_num_draft_tokens
    branches = 1
    if not k:
        drafter = NoDrafter()
    elif drafter is None:
        if rows and kv.page_size == 1:
            branches = config.speculative_tree_branches
        drafter = LookupDrafter(kv.cache, config.speculative_ngram_max, branches, texts)
    # On a pass that decodes a request's rows, a step's rows per request stay within what
    # it runs as decode rows (past that the whole pass would be an extend).
    max_rows = MAX_ROWS_PER_REQUEST if rows else None
    depths = DraftDepth(device_type, adaptive=not config.disable_adaptive_draft_depth)
    return Speculation(drafter, k, kv, sampler, context_len, stats, check_finish, grammar,
                       branches, config.speculative_tree_nodes, depths,
                       max_rows, predictions=rows)  # fmt: skip


def decodes_rows(runner: object) -> bool:
    """Whether `runner`'s passes run a request's rows as decode rows with per-row key
    tables, which draft trees need: its attention backend says so, on the CPU (CUDA passes
    may replay graphs, and the GPU backends decode one row per request)."""
    device = getattr(runner, "device", None)
    backend = getattr(runner, "attn_backend", None)
    return (getattr(device, "type", None) == "cpu"
            and bool(getattr(backend, "decodes_request_rows", False)))  # fmt: skip
