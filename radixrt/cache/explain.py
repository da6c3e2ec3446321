"""Why a prompt missed the cache: where it leaves the nearest cached prefix, and the cause.

`explain` walks the tree like `match_prefix` but changes nothing (no split, no access time, no
lock). Causes, in the order they are decided:

| cause             | meaning                                                                  |
|-------------------|--------------------------------------------------------------------------|
| `hit`             | every whole page of the prompt is cached                                 |
| `page_boundary`   | the prompt agrees with a cached page for fewer tokens than a page        |
| `evicted`         | the prompt went further into the cache once; those nodes were evicted    |
| `diverged`        | the cache holds another continuation: the prompt differs at `divergence` |
| `other_namespace` | one of the caller's other namespaces (another cache_salt) holds more     |
| `never_seen`      | nothing of the prompt is cached in its namespace                         |
| `new_suffix`      | the cached prefix ends where the prompt goes on: the rest was never sent |
| `cache_off`       | the server runs without a prefix cache (the view is NoPrefixCache)       |

The EvictionLog, a tree observer registered where the cache is built, remembers the last
evicted leaves (namespace, length and hash of the whole path from the root, time), so an
evicted prefix is told from one never seen. Only the
caller's own namespaces are ever looked at: nothing of another tenant's prompts is shown.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from radixrt.cache.tree_node import TreeNode, child_key, match_len, path_key
from radixrt.cache.tree_observer import TreeObserver
from radixrt.cache.tree_view import TreeView

CONTEXT_TOKENS = 32  # cached tokens returned after the divergence point
EVICTION_LOG_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Explanation:
    cause: str
    prompt_tokens: int
    matched_tokens: int  # whole pages of the prompt the cache holds
    divergence: int | None = None  # token offset where the prompt leaves the cached prefix
    cached_next: list[int] = field(default_factory=list)  # the cache's tokens from there
    evicted_at: float | None = None  # time.time() of the eviction (cause "evicted")
    other_namespace_tokens: int = 0  # what the caller's best other namespace matches


class EvictionLog(TreeObserver):
    """The last EVICTION_LOG_SIZE evicted leaves: (namespace, path length, path hash, time).
    Owned by the scheduler (which reads it in `explain`); a reset is not an eviction."""

    def __init__(self) -> None:
        self._entries: deque[tuple[str | None, int, int, float]] = deque(maxlen=EVICTION_LOG_SIZE)

    def on_evicted(self, node: TreeNode) -> None:
        self.record(node.extra_key, path_key(node))

    def record(self, extra_key: str | None, path: list[int]) -> None:
        self._entries.append((extra_key, len(path), hash(tuple(path)), time.time()))

    def find(self, extra_key: str | None, key: list[int], beyond: int) -> float | None:
        """When a prefix of `key` longer than `beyond` tokens was last evicted, if it was."""
        hashes: dict[int, int] = {}
        found = None
        for ns, length, h, at in self._entries:
            if ns != extra_key or length <= beyond or length > len(key):
                continue
            if length not in hashes:
                hashes[length] = hash(tuple(key[:length]))
            if hashes[length] == h:
                found = at if found is None else max(found, at)
        return found


def explain(
    cache: TreeView,
    evictions: EvictionLog,
    key: list[int],
    extra_key: str | None,
    own_prefix: str | None,
) -> Explanation:
    """Explain `key` in namespace `extra_key` from the tree and its eviction log; other
    namespaces starting with `own_prefix` are the caller's own and may be looked at (None:
    none; "" : every namespace)."""
    if not cache.caching:
        return Explanation("cache_off", len(key), 0)
    root = cache.root
    page = cache.page_size
    matched, cont = _walk(cache, root, key, extra_key)
    key_len = len(key) - len(key) % page
    if matched >= key_len:
        return Explanation("hit", len(key), matched)
    rest = key[matched:]
    agree = next(
        (i for i, (a, b) in enumerate(zip(cont, rest)) if a != b), min(len(cont), len(rest))
    )
    if cont and page > 1 and 0 < agree < page:
        return Explanation("page_boundary", len(key), matched, matched + agree, cont)
    at = evictions.find(extra_key, key, matched)
    if at is not None:
        return Explanation("evicted", len(key), matched, matched, evicted_at=at)
    if cont and matched + agree > 0:  # at the root, another first token shares nothing
        return Explanation("diverged", len(key), matched, matched + agree, cont)
    if own_prefix is not None:
        others = {c.extra_key for c in root.children.values() if c.extra_key != extra_key}
        best = max(
            (_walk(cache, root, key, ns)[0] for ns in others if (ns or "").startswith(own_prefix)),
            default=0,
        )
        if best > matched:
            return Explanation(
                "other_namespace", len(key), matched, matched, other_namespace_tokens=best
            )
    if matched == 0:
        return Explanation("never_seen", len(key), 0)
    return Explanation("new_suffix", len(key), matched, matched)


def _walk(
    cache: TreeView, root: TreeNode, key: list[int], extra_key: str | None
) -> tuple[int, list[int]]:
    """(whole-page tokens of `key` cached in `extra_key`, up to CONTEXT_TOKENS cached tokens
    that follow there: the rest of the node the match ends in, else the most recently used
    child of the node it ends at; [] if none)."""
    page = cache.page_size
    key_len = len(key) - len(key) % page
    node, pos = root, 0
    while pos < key_len:
        child = node.children.get(child_key(extra_key, key, pos, page))
        if child is None:
            break
        n = match_len(child.key, key, pos, key_len, page)
        if n < len(child.key):
            return pos + n, child.key[n : n + CONTEXT_TOKENS]
        node, pos = child, pos + n
    mine = [c for c in node.children.values() if c.extra_key == extra_key]
    if not mine:
        return pos, []
    return pos, max(mine, key=lambda c: c.last_access_time).key[:CONTEXT_TOKENS]
