"""BlockIndex: what one worker's KV cache holds, rebuilt from its KV events
(radixrt/cache/kv_event_schema.py), as a prefix index the `cache_aware` policy matches against.

A routing key here is the tuple of a prompt's block hashes (`prompt_blocks`), computed the way
the worker's tree computes them: chained from the request's namespace over whole blocks of
token ids. `match` counts the leading hashes the worker holds. Its parts:
- one set of stored hashes per event source (a worker with `--dp N` publishes N streams, one
  per replica; a block counts when any replica holds it); BlockStored adds, BlockRemoved
  drops, AllBlocksCleared empties that source's set;
- guesses: the blocks of a prompt just routed here, until its own events confirm them or
  `guess_ttl_s` passes, so that a burst of requests on a new prefix follows the first one
  before its prefill has finished and been published.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

from radixrt.cache.blocks import chain_hashes, root_hash
from radixrt.cache.kv_event_schema import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    block_hash,
)

MAX_GUESSES = 1 << 16  # guessed blocks kept per worker; the oldest go first


def prompt_blocks(token_ids: Sequence[int], namespace: str | None, block_size: int) -> tuple:
    """The event hashes of the whole blocks of a prompt in `namespace` (the worker's salt is
    empty, as its KV events are)."""
    hashes = chain_hashes(token_ids, block_size, root_hash(b"", namespace))
    return tuple(block_hash(h) for h in hashes)


class BlockIndex:
    """One worker's cached blocks by source, plus unconfirmed guesses (hash -> expiry)."""

    def __init__(self, guess_ttl_s: float = 30.0) -> None:
        self.guess_ttl_s = guess_ttl_s
        self.sources: dict[str, set[int]] = {}
        self.guesses: OrderedDict[int, float] = OrderedDict()
        self.block_size: int | None = None  # learnt from the first BlockStored
        self.events = 0

    # ---- fed by the worker's events ------------------------------------------------------

    def apply(self, source: str, batch: KVEventBatch) -> None:
        blocks = self.sources.setdefault(source, set())
        for ev in batch.events:
            self.events += 1
            if isinstance(ev, BlockStored):
                self.block_size = ev.block_size
                blocks.update(ev.block_hashes)
                for h in ev.block_hashes:
                    self.guesses.pop(h, None)
            elif isinstance(ev, BlockRemoved):
                blocks.difference_update(ev.block_hashes)
            elif isinstance(ev, AllBlocksCleared):
                blocks.clear()
                self.guesses.clear()

    def drop_source(self, source: str) -> None:
        """Forget a source whose stream restarted (its publisher's seq went back to 0)."""
        self.sources.pop(source, None)

    # ---- the prefix-index interface cache_aware uses -------------------------------------

    def match(self, key: Sequence[int]) -> int:
        """Leading block hashes of `key` held by any source or a live guess."""
        now = time.monotonic()
        n = 0
        for h in key:
            if self._held(h):
                n += 1
                continue
            expiry = self.guesses.get(h)
            if expiry is None or expiry < now:
                break
            n += 1
        return n

    def insert(self, key: Sequence[int]) -> None:
        """`key` was just routed here: guess its blocks until events confirm them."""
        expiry = time.monotonic() + self.guess_ttl_s
        for h in key:
            if not self._held(h):
                self.guesses[h] = expiry
                self.guesses.move_to_end(h)
        now = expiry - self.guess_ttl_s
        while self.guesses and (
            len(self.guesses) > MAX_GUESSES or next(iter(self.guesses.values())) < now
        ):
            self.guesses.popitem(last=False)  # oldest first: expiries are in insertion order

    def _held(self, h: int) -> bool:
        """Whether any source reported block `h` stored."""
        return any(h in blocks for blocks in self.sources.values())

    @property
    def size(self) -> int:
        """Blocks held (every source's, counted once per source) and live guesses."""
        return sum(len(b) for b in self.sources.values()) + len(self.guesses)

    def stats(self) -> dict[str, int | None]:
        return {
            "blocks": sum(len(b) for b in self.sources.values()),
            "guesses": len(self.guesses),
            "events": self.events,
            "block_size": self.block_size,
        }
