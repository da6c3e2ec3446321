"""`cache_aware`: send a prompt where its prefix most likely sits in the KV cache, unless
that would leave the replicas' loads too far apart.

Decision for one request, given the replicas' loads (requests in flight):
1. loads imbalanced (max - min > balance_abs_threshold and max > balance_rel_threshold * min):
   the least loaded replica;
2. else, for a session key (`prompt_cache_key`, `user`, X-Session-Id) seen before, the
   replica its last request went to, when it is offered: a session's prompts extend each
   other, so its prefix sits there;
3. else the replica whose approximate tree holds the longest prefix of the prompt, when
   matched / prompt length > cache_threshold;
4. else the least loaded; ties go to the replica whose tree holds the fewest items, which
   spreads new prefixes over the replicas.
The prompt is then inserted into the chosen replica's tree, and the session moves there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from radixrt.core.config import RouterConfig
from radixrt.serve.placement.approx_tree import ApproxTree
from radixrt.serve.placement.policy import BaseRoutingPolicy, RouteRequest, WorkerLoad, least_loaded

MAX_SESSIONS = 65536  # session -> replica entries kept; least recently used go first


class PrefixIndex(Protocol):
    """What cache_aware knows of one replica's cache: an ApproxTree of the prompts sent there
    (guesses), or a BlockIndex fed by the replica's KV events (routing/block_index.py)."""

    def match(self, key: Sequence[Any]) -> int: ...

    def insert(self, key: Sequence[Any]) -> None: ...

    @property
    def size(self) -> int: ...


class CacheAwarePolicy(BaseRoutingPolicy):
    """One prefix index per replica id, made by `make_index` (default: an ApproxTree) when the
    replica is first seen, and the replica id of each recent session."""

    name = "cache_aware"

    def __init__(
        self, config: RouterConfig, make_index: Callable[[str], PrefixIndex] | None = None
    ) -> None:
        super().__init__(config)
        self.make_index = make_index or (lambda worker_id: ApproxTree(config.max_tree_size))
        self.trees: dict[str, PrefixIndex] = {}
        self.sessions: OrderedDict[str, str] = OrderedDict()  # session -> replica id

    def select(self, req: RouteRequest, workers: Sequence[WorkerLoad]) -> int:
        trees = [self._tree(w.worker_id) for w in workers]
        sizes = [float(t.size) for t in trees]
        home = self._home(req.session, workers)
        if self.is_imbalanced([w.load for w in workers]):
            idx = least_loaded(workers, sizes)
        elif home is not None:
            idx = home
        elif req.key:
            matched = [t.match(req.key) for t in trees]
            best = max(range(len(workers)), key=lambda i: (matched[i], -workers[i].load, -i))
            if matched[best] / len(req.key) > self.config.cache_threshold:
                idx = best
            else:
                idx = least_loaded(workers, sizes)
        else:
            idx = least_loaded(workers, sizes)
        if req.key:
            trees[idx].insert(req.key)
        if req.session is not None:
            self._remember(req.session, workers[idx].worker_id)
        return idx

    def is_imbalanced(self, loads: Sequence[int]) -> bool:
        """True when the spread of `loads` exceeds both the absolute and relative bounds."""
        hi, lo = max(loads), min(loads)
        c = self.config
        return hi - lo > c.balance_abs_threshold and hi > c.balance_rel_threshold * lo

    def remove_worker(self, worker_id: str) -> None:
        self.trees.pop(worker_id, None)
        for session in [s for s, wid in self.sessions.items() if wid == worker_id]:
            del self.sessions[session]

    def stats(self) -> dict[str, Any]:
        return {"tree_sizes": {wid: t.size for wid, t in self.trees.items()}}

    def _tree(self, worker_id: str) -> PrefixIndex:
        tree = self.trees.get(worker_id)
        if tree is None:
            tree = self.trees[worker_id] = self.make_index(worker_id)
        return tree

    def _home(self, session: str | None, workers: Sequence[WorkerLoad]) -> int | None:
        """Index in `workers` of the replica `session` last went to; None when it is new or
        that replica is not offered (down, or already tried)."""
        wid = self.sessions.get(session) if session is not None else None
        return next((i for i, w in enumerate(workers) if w.worker_id == wid), None)

    def _remember(self, session: str, worker_id: str) -> None:
        self.sessions[session] = worker_id
        self.sessions.move_to_end(session)
        if len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
