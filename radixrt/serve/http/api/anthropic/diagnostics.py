"""Anthropic's cache diagnostics: `diagnostics.previous_message_id` asks why this request could
not reuse that message's prompt; the answer's `diagnostics.cache_miss_reason` says (the rule:
radixrt/serve/http/diagnostics/compare.py). Cache markers are no part of a fingerprint."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.api.anthropic.protocol import MessagesRequest, content_blocks, system_blocks
from radixrt.serve.http.diagnostics import Diagnosis, PromptRecord, fingerprint
from radixrt.serve.http.diagnostics import compare as rule

# The reasons that carry cache_missed_input_tokens; the others are a bare type.
CHANGED = (rule.MODEL_CHANGED, rule.SYSTEM_CHANGED, rule.TOOLS_CHANGED, rule.MESSAGES_CHANGED)
REASONS = {rule.NOT_FOUND: "previous_message_not_found", rule.UNAVAILABLE: "unavailable"}


def prompt_record(msg_id: str, req: MessagesRequest, ids: list[int]) -> PromptRecord:
    """The call's fingerprint under its message id, and the comparison it asks for."""
    messages = [{"role": m.role, "content": _unmarked(content_blocks(m.content))}
                for m in req.messages]  # fmt: skip
    tools = [msgspec.structs.replace(t, cache_control=None) for t in req.tools or ()]
    fp = fingerprint(req.model, _unmarked(system_blocks(req)), tools, messages, ids)
    ask = req.diagnostics
    compare_to = None if ask is None else ask.previous_message_id
    return PromptRecord(msg_id, fp, asked=ask is not None, compare_to=compare_to)


def render_diagnostics(diagnosis: Diagnosis) -> dict[str, Any] | None:
    """The answer's `diagnostics`: null when nothing diverged (or nothing to compare with)."""
    if diagnosis.kind in CHANGED:
        reason = {"type": diagnosis.kind, "cache_missed_input_tokens": diagnosis.missed_tokens}
    elif diagnosis.kind in REASONS:
        reason = {"type": REASONS[diagnosis.kind]}
    else:
        return None
    return {"cache_miss_reason": reason}


def _unmarked(blocks: list[Any]) -> list[Any]:
    """Blocks without their cache_control (a marker moves between turns; the text stays)."""
    out = []
    for b in blocks:
        if isinstance(b.content, list):
            b = msgspec.structs.replace(b, content=_unmarked(b.content))
        out.append(msgspec.structs.replace(b, cache_control=None))
    return out
