"""Retiring finished requests: whether one still has tokens no step computed (a forced
tail), and handing its computed tokens to the prefix cache, then pinning what it asked."""

from __future__ import annotations

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.pins import BasePinTable
from radixrt.core import FinishKind, Req


def has_uncomputed_tail(req: Req) -> bool:
    """Whether a finished request ends with tokens no step computed beyond its last one
    (jump-forward's): they are computed by the next step before it goes to the cache."""
    reason = req.finish_reason
    return (
        reason is not None and reason.kind != FinishKind.ABORT
        and req.req_pool_idx is not None and not req.sampling_params.return_logprob
        and req.seq_len - req.kv_len >= 2
    )  # fmt: skip


def retire(req: Req, kv: KVCacheManager, pins: BasePinTable) -> None:
    """Hand a finished request's computed tokens to the cache (its slots: the tree's now, or
    freed), then pin what it asks (not for an abort)."""
    kv.release(req)  # the prompt is in the tree now: its prefixes can be pinned
    if req.pins and req.finish_reason and req.finish_reason.kind != FinishKind.ABORT:
        for spec in req.pins:
            outcome = pins.pin(req.input_ids, req.extra_key, spec)
            req.pin_outcomes.append(outcome)
            if outcome.pinned:  # kept on the device; written through so a restart has it
                kv.prefix_pinned(req.input_ids[: outcome.tokens], req.extra_key)
