"""Why a prompt could not reuse an earlier one's prefix: the one rule behind every dialect's
cache-miss diagnostics (Anthropic `diagnostics.previous_message_id`, OpenAI
`prompt_cache_options.comparison_response_id`), which only parse the ask and render this.

The rule compares the request's structure with the earlier one's, in prefix order: model,
tools, system, then messages (the earlier messages must all be the first messages now); the
first part that differs is the reason. Token counts compare the prompts themselves:
`reusable_tokens` = the earlier prompt's tokens this prompt starts with (exact when it starts
with all of them, else rounded down to whole 16-token blocks) and `missed_tokens` = the earlier
prompt's length minus that: what could have been read from cache had the prefix matched.
When every part matches, the prompts may still part near the earlier one's end (its generation
prompt, which the next turn's rendering replaces with the answer or another role): that is a
hit while under SLACK_TOKENS are missed, `unavailable` past it (a setting or the template
rendered the same parts differently).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from radixrt.serve.http.diagnostics.fingerprint import BLOCK_TOKENS, Fingerprint
from radixrt.serve.http.diagnostics.store import FingerprintStore

SLACK_TOKENS = 2 * BLOCK_TOKENS  # a generation prompt, and the block it may straddle
HIT = "hit"  # the earlier prompt is (all but its generation prompt) a prefix of this one
NOT_FOUND = "not_found"  # no earlier fingerprint under that id for this tenant
NO_COMPARISON = "no_comparison"  # asked, without an earlier id (a first turn opting in)
UNAVAILABLE = "unavailable"  # same parts, yet the prompt diverges (another setting changed it)
MODEL_CHANGED = "model_changed"
TOOLS_CHANGED = "tools_changed"
SYSTEM_CHANGED = "system_changed"
MESSAGES_CHANGED = "messages_changed"  # an earlier message changed or went, not only appended


@dataclass(frozen=True, slots=True)
class Diagnosis:
    kind: str  # one of the names above
    missed_tokens: int = 0
    reusable_tokens: int = 0


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """What a chat-like call gives the pipeline: its response id and fingerprint (kept once it
    is answered), and whether and with what it asked to be compared."""

    response_id: str
    fingerprint: Fingerprint
    asked: bool = False  # the call asked for a diagnosis
    compare_to: str | None = None  # the earlier response's id


def diagnose(
    store: FingerprintStore, owner: str, record: PromptRecord, ids: Sequence[int]
) -> Diagnosis | None:
    """The diagnosis `record` asked for (None: not asked); `ids` are its prompt's tokens."""
    if not record.asked:
        return None
    if record.compare_to is None:
        return Diagnosis(NO_COMPARISON)
    return compare_prompts(store.get(owner, record.compare_to), record.fingerprint, ids)


def compare_prompts(prev: Fingerprint | None, cur: Fingerprint, ids: Sequence[int]) -> Diagnosis:
    """The rule (the module's docstring) for the prompt `ids` fingerprinted `cur`."""
    if prev is None:
        return Diagnosis(NOT_FOUND)
    reusable = prev.covers_start_of(ids, cur.blocks)
    missed = prev.prompt_len - reusable
    for kind, changed in (
        (MODEL_CHANGED, prev.model != cur.model),
        (TOOLS_CHANGED, prev.tools != cur.tools),
        (SYSTEM_CHANGED, prev.system != cur.system),
        (MESSAGES_CHANGED, not cur.messages.startswith(prev.messages)),
        (UNAVAILABLE, missed >= SLACK_TOKENS),
    ):
        if changed:
            return Diagnosis(kind, missed, reusable)
    return Diagnosis(HIT, missed, reusable)
