"""A prompt's fingerprint: digests of its parts (model name, system, tools, each message prefix)
and of its token prefix in blocks, plus its length. Hashes only: no text, no token ids."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

DIGEST_BYTES = 8  # per digest; a false match needs a 64-bit collision
BLOCK_TOKENS = 16  # the token prefix is compared in blocks of this many tokens
_ID_BYTES = 8  # a token id as a signed 64-bit integer ("q")
_OVERHEAD_BYTES = 200  # the object, its fields and the store's entry, about


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Invariant: `messages` and `blocks` are chains (digest i covers everything up to and
    including item i), DIGEST_BYTES each, concatenated; so two prompts share a prefix of
    messages (of blocks) exactly as far as their chains agree."""

    model: bytes
    system: bytes
    tools: bytes
    messages: bytes  # one chained digest per message
    blocks: bytes  # one chained digest per whole BLOCK_TOKENS-token block of the prompt
    tail: bytes  # the chain over the whole prompt, its last partial block included
    prompt_len: int  # tokens

    @property
    def nbytes(self) -> int:
        """About what it holds in memory, for the store's bound."""
        return _OVERHEAD_BYTES + len(self.messages) + len(self.blocks) + 4 * DIGEST_BYTES

    def covers_start_of(self, ids: Sequence[int], blocks: bytes) -> int:
        """How many of this prompt's tokens the prompt `ids` (its block chain `blocks`) starts
        with: all of them (prompt_len) when it starts with this whole prompt, else the
        shared whole blocks' tokens (a lower bound, short by fewer than BLOCK_TOKENS)."""
        shared = _shared_digests(self.blocks, blocks)
        whole = len(self.blocks) // DIGEST_BYTES
        if shared == whole and len(ids) >= self.prompt_len:
            last = self.blocks[-DIGEST_BYTES:] if whole else b""
            rest = _token_bytes(ids[whole * BLOCK_TOKENS : self.prompt_len])
            if _digest(last + rest) == self.tail:
                return self.prompt_len
        return shared * BLOCK_TOKENS


def fingerprint(
    model: str | None, system: Any, tools: Any, messages: Sequence[Any], ids: Sequence[int]
) -> Fingerprint:
    """The fingerprint of a prompt `ids` rendered from these parts; each part is anything
    msgspec encodes (its canonical JSON, keys sorted, is what is hashed). The dialect leaves
    out what does not change the prompt (cache markers) and normalizes equivalent spellings."""
    blocks = block_chain(ids)
    return Fingerprint(
        model=_digest(_canonical(model or "")),
        system=_digest(_canonical(system)),
        tools=_digest(_canonical(tools)),
        messages=_chain(_canonical(m) for m in messages),
        blocks=blocks,
        tail=_tail(ids, blocks),
        prompt_len=len(ids),
    )


def block_chain(ids: Sequence[int]) -> bytes:
    """The chained digests of the whole BLOCK_TOKENS-token blocks of `ids`."""
    data = _token_bytes(ids)
    step = BLOCK_TOKENS * _ID_BYTES
    whole = len(ids) // BLOCK_TOKENS
    return _chain(data[i * step : (i + 1) * step] for i in range(whole))


def shared_messages(a: Fingerprint, b: Fingerprint) -> int:
    """How many leading messages the two prompts have in common."""
    return _shared_digests(a.messages, b.messages)


def _tail(ids: Sequence[int], blocks: bytes) -> bytes:
    """The chain carried over the last partial block (its digest alone when there is none)."""
    whole = len(ids) // BLOCK_TOKENS
    last = blocks[-DIGEST_BYTES:] if whole else b""
    return _digest(last + _token_bytes(ids[whole * BLOCK_TOKENS :]))


def _canonical(part: Any) -> bytes:
    return msgspec.json.encode(part, order="sorted")


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _chain(items: Any) -> bytes:
    out = bytearray()
    prev = b""
    for data in items:
        prev = _digest(prev + data)
        out += prev
    return bytes(out)


def _token_bytes(ids: Sequence[int]) -> bytes:
    return array("q", ids).tobytes()


def _shared_digests(a: bytes, b: bytes) -> int:
    """Leading digests two chains have in common."""
    n = min(len(a), len(b)) // DIGEST_BYTES
    for i in range(n):
        at = i * DIGEST_BYTES
        if a[at : at + DIGEST_BYTES] != b[at : at + DIGEST_BYTES]:
            return i
    return n
