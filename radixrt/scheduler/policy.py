"""Admission order of waiting requests: lpm, dfs-weight, fcfs, random, with aging."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from radixrt.core import Req

# Above this many waiting requests, lpm/dfs-weight fall back to fcfs (matching costs time).
_MAX_SORTED_QUEUE = 256


class SchedulePolicy:
    """Orders the waiting queue before each admission round.

    `match(req)` gives (cached-prefix length, deepest matched tree node) of a request; it may
    split tree nodes but never allocates or frees. Nodes expose `.parent`. Requests that
    waited longer than `max_wait_s` go first, oldest first, whatever the policy, so cold
    requests are never starved.
    """

    def __init__(
        self, name: str, match: Callable[[Req], tuple[int, Any]], max_wait_s: float, seed: int = 0
    ) -> None:
        self.name = name
        self.match = match
        self.max_wait_s = max_wait_s
        self._rng = random.Random(seed)

    def order(self, waiting: list[Req]) -> list[Req]:
        """Return the waiting requests in admission order (a new list)."""
        now = time.monotonic()
        aged = sorted(
            (r for r in waiting if now - r.arrival_time > self.max_wait_s),
            key=lambda r: r.arrival_time,
        )
        aged_ids = {id(r) for r in aged}
        rest = [r for r in waiting if id(r) not in aged_ids]
        if self.name == "fcfs" or len(rest) > _MAX_SORTED_QUEUE:
            pass
        elif self.name == "random":
            self._rng.shuffle(rest)
        elif self.name == "lpm":
            lens = {id(r): self.match(r)[0] for r in rest}
            rest.sort(key=lambda r: -lens[id(r)])  # stable: ties keep arrival order
        elif self.name == "dfs-weight":
            rest = self._dfs_weight_order(rest)
        return aged + rest

    def _dfs_weight_order(self, reqs: list[Req]) -> list[Req]:
        """Walk the cache tree depth first from the root, heavier subtrees first.

        A node's weight is the number of waiting requests whose match ends in its subtree, so
        requests sharing cached prefixes are admitted together.
        """
        at_node: dict[int, list[Req]] = {}
        nodes: dict[int, Any] = {}
        children: dict[int, list[Any]] = {}
        for r in reqs:
            node = self.match(r)[1]
            at_node.setdefault(id(node), []).append(r)
            while node is not None and id(node) not in nodes:  # add the path up to a seen node
                nodes[id(node)] = node
                if node.parent is not None:
                    children.setdefault(id(node.parent), []).append(node)
                node = node.parent
        weight = dict.fromkeys(nodes, 0)
        for node_id, waiting_here in at_node.items():
            node = nodes[node_id]
            while node is not None:
                weight[id(node)] += len(waiting_here)
                node = node.parent
        roots = [n for n in nodes.values() if n.parent is None]
        out: list[Req] = []
        stack = sorted(roots, key=lambda n: weight[id(n)])
        while stack:
            node = stack.pop()
            out.extend(at_node.get(id(node), []))
            stack.extend(sorted(children.get(id(node), []), key=lambda n: weight[id(n)]))
        return out
