"""`cache_aware`: send a prompt where its prefix most likely sits in the KV cache, unless
that would leave the replicas' loads too far apart.

Decision for one request, given the replicas' loads (requests in flight):
1. loads imbalanced (max - min > balance_abs_threshold and max > balance_rel_threshold * min):
   the least loaded replica;
2. else the replica whose approximate tree holds the longest prefix of the prompt, when
   matched / prompt length > cache_threshold;
3. else the least loaded; ties go to the replica whose tree holds the fewest items, which
   spreads new prefixes over the replicas.
The prompt is then inserted into the chosen replica's tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixrt.config import RouterConfig
from radixrt.routing.approx_tree import ApproxTree
from radixrt.routing.policy import BaseRoutingPolicy, RouteRequest, WorkerLoad, least_loaded


class CacheAwarePolicy(BaseRoutingPolicy):
    """One ApproxTree per replica id, created when the replica is first seen."""

    name = "cache_aware"

    def __init__(self, config: RouterConfig) -> None:
        super().__init__(config)
        self.trees: dict[str, ApproxTree] = {}

    def select(self, req: RouteRequest, workers: Sequence[WorkerLoad]) -> int:
        trees = [self._tree(w.worker_id) for w in workers]
        sizes = [float(t.size) for t in trees]
        if self.is_imbalanced([w.load for w in workers]) or not req.key:
            idx = least_loaded(workers, sizes)
        else:
            matched = [t.match(req.key) for t in trees]
            best = max(range(len(workers)), key=lambda i: (matched[i], -workers[i].load, -i))
            if matched[best] / len(req.key) > self.config.cache_threshold:
                idx = best
            else:
                idx = least_loaded(workers, sizes)
        if req.key:
            trees[idx].insert(req.key)
        return idx

    def is_imbalanced(self, loads: Sequence[int]) -> bool:
        """True when the spread of `loads` exceeds both the absolute and relative bounds."""
        hi, lo = max(loads), min(loads)
        c = self.config
        return hi - lo > c.balance_abs_threshold and hi > c.balance_rel_threshold * lo

    def remove_worker(self, worker_id: str) -> None:
        self.trees.pop(worker_id, None)

    def stats(self) -> dict[str, Any]:
        return {"tree_sizes": {wid: t.size for wid, t in self.trees.items()}}

    def _tree(self, worker_id: str) -> ApproxTree:
        tree = self.trees.get(worker_id)
        if tree is None:
            tree = self.trees[worker_id] = ApproxTree(self.config.max_tree_size)
        return tree
