"""The token ids of answered chat turns, so that a next turn that replays one is tokenized
with the ids the model computed, not the tokenizer's own.

An output's tokens are the model's choices (a forced call's grammar allows many spellings of
one text: `":`,`"`,`s`,`ear`,`ch` where the tokenizer writes `":"`,`search`); a client that
sends the turn back as text gets it re-tokenized, and the prefix cache misses from the first
token that differs. Kept per answered turn: a digest of its prompt text followed by the
output's text, and the ids of both. A new prompt whose text starts with a kept text takes
those ids and tokenizes only the rest (the same text, so the model reads the same thing).

Per owner (tenant; "" without tenants): a kept turn says which texts an owner's requests
produced, so no other owner's prompt is matched against it. Memory is bounded (ServerConfig's
continuation_max_bytes of ids over all owners, continuation_max_turns per owner, least
recently used forgotten first); either bound 0 keeps nothing (NoContinuations).
Thread-safe: lookups run on the tokenizer thread, puts on the event loop.
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

TAIL = 64  # characters of a kept text's end, compared before the whole text's digest


@dataclass(frozen=True, slots=True)
class _Kept:
    length: int  # characters of the text
    tail: str  # its last TAIL characters
    digest: bytes
    ids: array

    @property
    def nbytes(self) -> int:
        return self.ids.itemsize * len(self.ids) + len(self.tail) + 96


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class BaseContinuations(ABC):
    """How a prompt text is tokenized: a kept turn's ids for the longest kept text it starts
    with (or the `known` prefix's, when longer), then the tokenizer's for the rest."""

    @abstractmethod
    def put(
        self,
        owner: str,
        prompt_text: str,
        prompt_ids: list[int],
        output_ids: list[int],
        tokenizer: Any,
    ) -> None:
        """Keep an answered turn's prompt and output ids under `owner` (the tenant)."""

    @abstractmethod
    def replay(self, owner: str, text: str) -> tuple[int, list[int]] | None:
        """(characters, ids) of the longest kept turn `text` starts with; None if none."""

    def head(
        self, owner: str, text: str, known: tuple[str, list[int]] | None = None
    ) -> tuple[int, list[int]]:
        """(characters, ids) of `text`'s start whose ids are known: the longer of the kept
        turn it replays and `known` (a prefix text with its ids, used when `text` starts
        with it); (0, []) when neither."""
        best = self.replay(owner, text) or (0, [])
        if known is not None and len(known[0]) > best[0] and text.startswith(known[0]):
            return len(known[0]), list(known[1])
        return best

    def encode(
        self,
        owner: str,
        text: str,
        tokenizer: Any,
        known: tuple[str, list[int]] | None = None,
    ) -> list[int]:
        """`text`'s ids: head's, then the tokenizer's of the rest."""
        n, ids = self.head(owner, text, known)
        rest = text[n:]
        return [*ids, *(tokenizer.encode(rest, add_special_tokens=False) if rest else ())]


class NoContinuations(BaseContinuations):
    """Kept turns off (a bound set to 0): nothing kept, every prompt the tokenizer's."""

    def put(
        self,
        owner: str,
        prompt_text: str,
        prompt_ids: list[int],
        output_ids: list[int],
        tokenizer: Any,
    ) -> None:
        pass

    def replay(self, owner: str, text: str) -> tuple[int, list[int]] | None:
        return None


def make_continuations(max_bytes: int, max_turns: int) -> BaseContinuations:
    """The store within these bounds; the null one when either is 0."""
    if max_bytes <= 0 or max_turns <= 0:
        return NoContinuations()
    return ContinuationStore(max_bytes, max_turns)


class ContinuationStore(BaseContinuations):
    def __init__(self, max_bytes: int, per_owner: int) -> None:
        self.max_bytes = max_bytes
        self.per_owner = per_owner
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, bytes], _Kept] = OrderedDict()  # LRU over all
        self._count: dict[str, int] = {}  # owner -> kept turns
        self._bytes = 0

    def put(
        self,
        owner: str,
        prompt_text: str,
        prompt_ids: list[int],
        output_ids: list[int],
        tokenizer: Any,
    ) -> None:
        """Keep an answered turn: its prompt with the whole output, and without the output's
        last token (a stop token the template may spell as text, or not at all)."""
        for n in {len(output_ids), max(0, len(output_ids) - 1)}:
            if n == 0:
                continue
            text = prompt_text + tokenizer.decode(output_ids[:n], skip_special_tokens=False)
            ids = array("i", prompt_ids)
            ids.extend(output_ids[:n])
            self._put(owner, _Kept(len(text), text[-TAIL:], _digest(text), ids))

    def replay(self, owner: str, text: str) -> tuple[int, list[int]] | None:
        best = self._longest(owner, text)
        return None if best is None else (best.length, best.ids.tolist())

    def _longest(self, owner: str, text: str) -> _Kept | None:
        with self._lock:
            mine = [(key, k) for key, k in self._kept.items() if key[0] == owner]
        best: tuple[tuple[str, bytes], _Kept] | None = None
        for key, kept in mine:
            if kept.length > len(text) or (best is not None and kept.length <= best[1].length):
                continue
            if text[kept.length - len(kept.tail) : kept.length] != kept.tail:
                continue
            if _digest(text[: kept.length]) == kept.digest:
                best = (key, kept)
        if best is None:
            return None
        with self._lock:
            if best[0] in self._kept:
                self._kept.move_to_end(best[0])
        return best[1]

    def _put(self, owner: str, kept: _Kept) -> None:
        key = (owner, kept.digest)
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
                self._count[owner] -= 1
            if kept.nbytes > self.max_bytes:
                return
            self._kept[key] = kept
            self._bytes += kept.nbytes
            self._count[owner] = self._count.get(owner, 0) + 1
            if self._count[owner] > self.per_owner:
                self._drop(next(k for k in self._kept if k[0] == owner))
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._kept)))

    def _drop(self, key: tuple[str, bytes]) -> None:
        """Forget one kept turn (caller holds _lock)."""
        kept = self._kept.pop(key)
        self._bytes -= kept.nbytes
        self._count[key[0]] -= 1
        if not self._count[key[0]]:
            del self._count[key[0]]
