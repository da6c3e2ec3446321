"""The prompt-stability guard: in a conversation, each turn's prompt should extend the last
turn's prompt and reply token for token, or the prefix cache misses from where it does not.

Per session (`X-Session-Id`, `prompt_cache_key` or `user`, scoped to the caller), the guard
keeps the last chat turn in hashes, never its text: a keyed digest of each message and a keyed
rolling hash of its prompt and reply through each token (4 bytes a token). The next turn's
prompt is hashed the same way; at the first differing token it counts a break
(`radixrt_prefix_breaks_total{cause}`) and logs the token offset, the cause and the session's
digest (no prompt text, no session id). Causes:

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

Memory is bounded (clients choose the keys): MAX_BYTES over all sessions and MAX_SESSIONS
sessions, least recently used forgotten first, and MAX_SESSIONS_PER_CALLER per caller (its own
least recently used forgotten first, so one caller cannot push out the others').
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("radixrt")

SessionKey = tuple[str, str]  # (caller, session), as the pipeline gives them
Messages = list[dict[str, str]]
Turn = tuple[SessionKey, Messages, list[int]]  # a chat turn: key, messages, prompt ids
MAX_SESSIONS = 4096
MAX_SESSIONS_PER_CALLER = 64
MAX_BYTES = 32 * 2**20  # of every session's hashes together
SESSION_BYTES = 256  # what a session costs besides its hashes (counted against MAX_BYTES)
_MOD = (1 << 61) - 1  # the rolling hash's modulus (a Mersenne prime)


@dataclass(slots=True)
class _Turn:
    caller: str
    messages: list[bytes]  # keyed digest of each message
    first_is_system: bool
    first_other: int  # the first message that is not a system message (-1: none is)
    prefix: array  # the rolling hash of the prompt then the reply, through each token
    prompt_len: int

    @property
    def nbytes(self) -> int:
        return SESSION_BYTES + self.prefix.itemsize * len(self.prefix) + 8 * len(self.messages)


@dataclass(frozen=True, slots=True)
class PrefixBreak:
    cause: str
    offset: int  # token offset of the first differing token


class PromptGuard:
    def __init__(
        self,
        metrics: Any,
        max_bytes: int = MAX_BYTES,
        max_sessions: int = MAX_SESSIONS,
        max_per_caller: int = MAX_SESSIONS_PER_CALLER,
    ) -> None:
        self._metrics = metrics
        self.max_bytes, self.max_sessions, self.max_per_caller = (
            max_bytes,
            max_sessions,
            max_per_caller,
        )
        self._key = secrets.token_bytes(16)  # keys every digest: they mean nothing outside
        self._base = secrets.randbelow(_MOD - 2**32) + 2**32
        self._turns: OrderedDict[tuple[str, bytes], _Turn] = OrderedDict()  # oldest first
        self._by_caller: dict[str, OrderedDict[bytes, None]] = {}  # each caller's, oldest first
        self.nbytes = 0  # of every session held

    def __len__(self) -> int:
        return len(self._turns)

    def check(
        self, key: SessionKey, messages: Messages, prompt_ids: list[int]
    ) -> PrefixBreak | None:
        """Compare a new turn of session `key` with its last; count and log a break."""
        session = self._digest(key[1].encode())
        last = self._turns.get((key[0], session))
        if last is None:
            return None
        old = last.prefix
        at = self._first_difference(old, prompt_ids)
        if at >= len(old):
            return None
        if not _same_conversation(last, [self._message(m) for m in messages]):
            return None  # a new conversation under the same session key
        found = PrefixBreak(self._cause(last, messages, at), at)
        self._metrics.observe_prefix_break(found.cause)
        logger.warning(
            "session %s: the prompt leaves the last turn at token %d (%s)",
            session.hex()[:12],
            at,
            found.cause,
        )
        return found

    def record(
        self, key: SessionKey, messages: Messages, prompt_ids: list[int], output_ids: list[int]
    ) -> None:
        caller, session = key[0], self._digest(key[1].encode())
        self._forget((caller, session))
        turn = _Turn(
            caller,
            [self._message(m) for m in messages],
            bool(messages) and messages[0].get("role") == "system",
            next((i for i, m in enumerate(messages) if m.get("role") != "system"), -1),
            self._prefix_hashes(list(prompt_ids) + list(output_ids)),
            len(prompt_ids),
        )
        if turn.nbytes > self.max_bytes:
            return  # larger than the whole budget: not followed
        self._turns[(caller, session)] = turn
        mine = self._by_caller.setdefault(caller, OrderedDict())
        mine[session] = None
        self.nbytes += turn.nbytes
        while len(mine) > self.max_per_caller:
            self._forget((caller, next(iter(mine))))
        while self.nbytes > self.max_bytes or len(self._turns) > self.max_sessions:
            self._forget(next(iter(self._turns)))

    def _forget(self, key: tuple[str, bytes]) -> None:
        turn = self._turns.pop(key, None)
        if turn is None:
            return
        self.nbytes -= turn.nbytes
        mine = self._by_caller[key[0]]
        del mine[key[1]]
        if not mine:
            del self._by_caller[key[0]]

    def _digest(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, key=self._key, digest_size=8).digest()

    def _message(self, message: dict[str, str]) -> bytes:
        return self._digest(json.dumps(message, sort_keys=True).encode())

    def _prefix_hashes(self, ids: list[int]) -> array:
        """The rolling hash of ids[:i + 1] for each i, kept to 32 bits."""
        out, h, base = array("I"), 0, self._base
        for t in ids:
            h = (h * base + t + 1) % _MOD
            out.append(h & 0xFFFFFFFF)
        return out

    def _first_difference(self, old: array, ids: list[int]) -> int:
        """The first offset where `ids` leaves the hashed sequence (or where either ends)."""
        h, base = 0, self._base
        for i, t in enumerate(ids[: len(old)]):
            h = (h * base + t + 1) % _MOD
            if h & 0xFFFFFFFF != old[i]:
                return i
        return min(len(old), len(ids))

    def _cause(self, last: _Turn, messages: Messages, at: int) -> str:
        if at >= last.prompt_len:
            return "assistant_turn_rewritten"
        before = last.messages
        now = [self._message(m) for m in messages[: len(before)]]
        if before and now and before[0] != now[0] and last.first_is_system:
            return "system_prompt_changed"
        if now != before:
            return "history_rewritten"
        return "template_changed"


def _same_conversation(last: _Turn, now: list[bytes]) -> bool:
    """Whether `now` goes on from the last turn: its first message after the system prompt
    is the same."""
    first = last.first_other
    return first >= 0 and len(now) > first and now[first] == last.messages[first]
