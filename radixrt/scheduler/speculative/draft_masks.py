"""The grammar masks along constrained requests' drafts: a draft cut to what its request's
grammar allows when a step plans it, the masks of its rows kept until the step verifies them
(GrammarQueue.draft_masks: row j's mask is what a decode step would use after the first j
drafted tokens)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import torch

from radixrt.core import Req
from radixrt.scheduler.grammar_queue import GrammarQueue

logger = logging.getLogger("radixrt")


class DraftMasks:
    """The masks of one step's constrained drafts, by id(req): set by `constrain` while the
    step is planned, taken and cleared by `vocab_mask` when it is verified."""

    def __init__(self, grammar: GrammarQueue, eos_token_ids: list[int]) -> None:
        self.grammar = grammar
        self.eos_token_ids = eos_token_ids
        self._masks: dict[int, torch.Tensor] = {}

    def clear(self) -> None:
        self._masks.clear()

    def constrain(
        self, req: Req, draft: list[int], others: Callable[[], list[list[int]]] | None = None
    ) -> list[int]:
        """`draft` cut to what `req`'s grammar allows; where that cuts it short, the chain of
        `others()` (as long as `draft` at most) the grammar allows furthest, if longer. The
        kept chain's masks are kept for `vocab_mask`."""
        stop_ids = {*self.eos_token_ids, *req.sampling_params.stop_token_ids}
        best: list[int] = []
        best_masks = None
        walked: set[tuple[int, ...]] = set()  # others() often repeats `draft`: walk it once
        for cand in _candidates(draft, others):
            if len(cand) <= len(best) or tuple(cand) in walked:
                continue
            walked.add(tuple(cand))
            try:
                masks = self.grammar.draft_masks(req, cand, stop_ids)  # (1 + n, W)
            except Exception:  # the request's own grammar: its decode step's mask reports it
                logger.exception("drafting under the grammar of request %s failed", req.rid)
                return []
            if masks.shape[0] - 1 > len(best):
                best, best_masks = cand[: masks.shape[0] - 1], masks
            if len(best) == len(draft):  # nothing cut: no other can be longer
                break
        if best_masks is not None:
            self._masks[id(req)] = best_masks
        return best

    def vocab_mask(self, reqs: list[Req], num_rows: int) -> torch.Tensor | None:
        """(num_rows, W) int32 over the verifying rows of `reqs` (1 + len(draft_ids) each, in
        order): each constrained request's draft masks in its rows, all ones in the others;
        None when no request here is constrained. Clears the step's masks."""
        if not self._masks:
            return None
        mask = None
        i = 0
        for req in reqs:
            masks = self._masks.pop(id(req), None)
            if masks is not None:
                if mask is None:
                    mask = torch.full((num_rows, masks.shape[1]), -1, dtype=torch.int32)
                mask[i : i + 1 + len(req.draft_ids)] = masks
            i += 1 + len(req.draft_ids)
        self._masks.clear()
        return mask


def _candidates(
    draft: list[int], others: Callable[[], list[list[int]]] | None
) -> Iterator[list[int]]:
    """`draft`, then (asked only if wanted) each of `others()` cut to its length."""
    yield draft
    if others is not None:
        for other in others():
            yield other[: len(draft)]
