"""Stateless spreading: `round_robin` (in turn) and `least_load` (fewest requests in flight)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from radixrt.core.config import RouterConfig
from radixrt.serve.placement.policy import BaseRoutingPolicy, RouteRequest, WorkerLoad, least_loaded


class RoundRobinPolicy(BaseRoutingPolicy):
    """Each replica in turn, ignoring prompts and loads."""

    name = "round_robin"

    def __init__(self, config: RouterConfig) -> None:
        super().__init__(config)
        self._turn = itertools.count()

    def select(self, req: RouteRequest, workers: Sequence[WorkerLoad]) -> int:
        return next(self._turn) % len(workers)


class LeastLoadPolicy(BaseRoutingPolicy):
    """The replica with the fewest requests in flight; ties rotate so idle replicas share."""

    name = "least_load"

    def __init__(self, config: RouterConfig) -> None:
        super().__init__(config)
        self._turn = itertools.count()

    def select(self, req: RouteRequest, workers: Sequence[WorkerLoad]) -> int:
        start = next(self._turn) % len(workers)
        rank = [(i - start) % len(workers) for i in range(len(workers))]
        return least_loaded(workers, rank)
