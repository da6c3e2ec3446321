"""OpenAI's prompt cache diagnostics: `prompt_cache_options.comparison_response_id` asks why
this request could not reuse that response's prompt; the answer's `prompt_cache_diagnostics`
says (the rule: radixrt/serve/http/diagnostics/compare.py). Chat completions here; the Responses
API renders the same object."""

from __future__ import annotations

from typing import Any

from radixrt.serve.http.api.openai.messages import chat_turns
from radixrt.serve.http.api.openai.protocol import ChatCompletionRequest
from radixrt.serve.http.diagnostics import Diagnosis, Fingerprint, fingerprint
from radixrt.serve.http.diagnostics import compare as rule

# OpenAI has no system part: a changed system (instructions) message is a changed input.
MISS_REASONS = {
    rule.MODEL_CHANGED: "model_changed",
    rule.TOOLS_CHANGED: "tools_changed",
    rule.SYSTEM_CHANGED: "input_changed",
    rule.MESSAGES_CHANGED: "input_changed",
}
TYPES = {
    rule.HIT: "cache_hit",
    rule.NOT_FOUND: "comparison_response_not_found",
    rule.UNAVAILABLE: "unavailable",
}
SYSTEM_ROLES = ("system", "developer")


def chat_fingerprint(req: ChatCompletionRequest, ids: list[int]) -> Fingerprint:
    """A chat call's fingerprint: its leading system/developer messages are its system."""
    turns = chat_turns(req.messages)
    head = 0
    while head < len(turns) and turns[head]["role"] in SYSTEM_ROLES:
        head += 1
    return fingerprint(req.model, turns[:head], req.tools or [], turns[head:], ids)


def comparison_of(req: ChatCompletionRequest) -> str | None:
    """The response id a chat call asks to be compared with, if any."""
    options = req.prompt_cache_options
    return None if options is None else options.comparison_response_id


def render_cache_diagnostics(diagnosis: Diagnosis) -> dict[str, Any] | None:
    """`prompt_cache_diagnostics` in the shape of OpenAI's Responses API."""
    if diagnosis.kind in MISS_REASONS:
        return {
            "type": "cache_miss",
            "reason": MISS_REASONS[diagnosis.kind],
            "cache_missed_tokens": diagnosis.missed_tokens,
            "comparison_reusable_tokens": diagnosis.reusable_tokens,
        }
    kind = TYPES.get(diagnosis.kind)
    return None if kind is None else {"type": kind}
