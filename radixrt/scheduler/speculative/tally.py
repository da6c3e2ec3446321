"""tally: one verification counted where it is read: the request's draft guard (the next
draft's length, pauses), its own counters (meta_info) and the scheduler's (metrics)."""

from __future__ import annotations

from radixrt.core import Req
from radixrt.scheduler.speculative.acceptance import Acceptance
from radixrt.scheduler.speculative.guard import DraftGuard
from radixrt.scheduler.speculative.tree import DraftTree
from radixrt.scheduler.stats import SchedulerStats


def tally(stats: SchedulerStats, engine: tuple[Acceptance, Acceptance], req: Req,
          tree: DraftTree | None, accepted: int, emitted: int, path: list[int],
          after_prompt: Acceptance | None = None) -> None:  # fmt: skip
    """Count a verification of req.draft_ids (still set): every node verified is a drafted
    token (a tree's cost), against the `accepted` ones of `path` and the `emitted` ones. The
    guard adapts the depth, and the request's and the `engine`'s acceptance rates of its kind
    of draft follow: a tree's deepest branch against its accepted path; a draft verified in
    its prompt's pass counts in `after_prompt` alone; a draft from the request's predicted
    output in neither engine rate (one caller's predictions move no other request's drafts)
    and in its prediction counts."""
    nodes = len(req.draft_ids)
    guard = req.draft_guard
    assert isinstance(guard, DraftGuard)  # made by its plan, before it drafted
    depth = max(tree.depths) if tree else nodes
    if req.draft_predicted:  # the caller's prediction: the request's own counts alone
        req.prediction_drafted += nodes
        req.prediction_accepted += accepted
    if after_prompt is not None:
        if not req.draft_predicted:
            after_prompt.record(depth, accepted)
        stats.spec_prompt_end_steps += 1
        stats.spec_prompt_end_accepted += accepted
    else:
        guard.record(depth, accepted)
        if not req.draft_predicted:
            engine[guard.trusted].record(depth, accepted)
    req.spec_drafted += nodes
    req.spec_accepted += accepted
    stats.generated_tokens += emitted
    stats.spec_drafted_tokens += nodes
    stats.spec_accepted_tokens += accepted
    stats.spec_verify_steps += 1
    stats.spec_emitted_tokens += emitted
    if tree is not None:
        stats.spec_tree_steps += 1
        stats.spec_tree_branches += len(tree.leaves())
        first_leaf = tree.leaves()[0]  # nodes 1..first_leaf: the first branch
        side = any(node > first_leaf for node in path[1 : accepted + 1])
        stats.spec_tree_side_accepts += side
        guard.record_tree(side)
