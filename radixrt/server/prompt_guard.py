"""The prompt-stability guard: in a conversation, each turn's prompt should extend the last
turn's prompt and reply token for token, or the prefix cache misses from where it does not.

Per session (`X-Session-Id`, `prompt_cache_key` or `user`, scoped to the caller), the guard
keeps the last chat turn's messages, prompt ids and output ids. The next turn's prompt ids are
compared with them; at the first differing token it counts a break
(`radixrt_prefix_breaks_total{cause}`) and logs the token offset and ~40 characters of both
sides. Causes:

| cause                      | where the prompt leaves the last turn                        |
|----------------------------|--------------------------------------------------------------|
| `system_prompt_changed`    | in the earlier prompt, and the first (system) message changed |
| `history_rewritten`        | in the earlier prompt, and a later earlier message changed    |
| `template_changed`         | in the earlier prompt, with the same earlier messages (the    |
|                            | template renders them differently now: a date, a tool list)   |
| `assistant_turn_rewritten` | in the last reply: the template or the client changed it (a   |
|                            | stripped reasoning part or whitespace, another tokenization)  |

A turn whose first message after the system prompt differs from the last turn's starts a new
conversation under the same key: it is not a break.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("radixrt")

SessionKey = tuple[str, str]  # (caller, session)
Messages = list[dict[str, str]]
Turn = tuple[SessionKey, Messages, list[int]]  # a chat turn: key, messages, prompt ids
MAX_SESSIONS = 4096  # least recently used sessions are forgotten first
CONTEXT_CHARS = 40
CONTEXT_TOKENS = 32


@dataclass(slots=True)
class _Turn:
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    output_ids: list[int]


@dataclass(frozen=True, slots=True)
class PrefixBreak:
    cause: str
    offset: int  # token offset of the first differing token
    new_side: str
    old_side: str


class PromptGuard:
    def __init__(self, tokenizer: Any, metrics: Any) -> None:
        self._tokenizer = tokenizer
        self._metrics = metrics
        self._turns: OrderedDict[SessionKey, _Turn] = OrderedDict()

    def check(
        self, key: SessionKey, messages: Messages, prompt_ids: list[int]
    ) -> PrefixBreak | None:
        """Compare a new turn of session `key` with its last; count and log a break."""
        last = self._turns.get(key)
        if last is None:
            return None
        old = last.prompt_ids + last.output_ids
        at = next(
            (i for i, (a, b) in enumerate(zip(old, prompt_ids, strict=False)) if a != b),
            min(len(old), len(prompt_ids)),
        )
        if at >= len(old):
            return None
        if not _same_conversation(last.messages, messages):
            return None  # a new conversation under the same session key
        found = PrefixBreak(
            _cause(last, messages, at),
            at,
            self._side(prompt_ids, at),
            self._side(old, at),
        )
        self._metrics.observe_prefix_break(found.cause)
        logger.warning(
            "session %s: the prompt leaves the last turn at token %d (%s): now %r, before %r",
            key[1],
            at,
            found.cause,
            found.new_side,
            found.old_side,
        )
        return found

    def record(
        self, key: SessionKey, messages: Messages, prompt_ids: list[int], output_ids: list[int]
    ) -> None:
        self._turns[key] = _Turn(messages, list(prompt_ids), list(output_ids))
        self._turns.move_to_end(key)
        while len(self._turns) > MAX_SESSIONS:
            self._turns.popitem(last=False)

    def _side(self, ids: list[int], at: int) -> str:
        before = self._tokenizer.decode(ids[max(0, at - CONTEXT_TOKENS) : at])[-CONTEXT_CHARS:]
        after = self._tokenizer.decode(ids[at : at + CONTEXT_TOKENS])[:CONTEXT_CHARS]
        return before + " | " + after


def _same_conversation(before: Messages, now: Messages) -> bool:
    """Whether `now` goes on from `before`: its first message after the system prompt is
    the same."""
    first = next((i for i, m in enumerate(before) if m.get("role") != "system"), None)
    return first is not None and len(now) > first and now[first] == before[first]


def _cause(last: _Turn, messages: Messages, at: int) -> str:
    if at >= len(last.prompt_ids):
        return "assistant_turn_rewritten"
    before = last.messages
    now = messages[: len(before)]
    if before and now and before[0] != now[0] and before[0].get("role") == "system":
        return "system_prompt_changed"
    if now != before:
        return "history_rewritten"
    return "template_changed"
