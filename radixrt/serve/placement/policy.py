"""The routing-policy interface and its registry (policies are imported only when chosen)."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from radixrt.core.config import RouterConfig

# name -> "module:Class"; the CLI's --router-policy choices come from here.
ROUTING_POLICIES = {
    "cache_aware": "radixrt.serve.placement.cache_aware:CacheAwarePolicy",
    "round_robin": "radixrt.serve.placement.simple:RoundRobinPolicy",
    "least_load": "radixrt.serve.placement.simple:LeastLoadPolicy",
    "consistent_hash": "radixrt.serve.placement.consistent_hash:ConsistentHashPolicy",
}


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a policy may look at: the prompt's key and the client's session, if any."""

    key: Sequence[Hashable] = ()  # token ids (--dp) or prompt text (router); may be empty
    session: str | None = None  # `user`, `prompt_cache_key` or the X-Session-Id header


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One replica that may take a request: its stable id and its requests in flight."""

    worker_id: str
    load: int


class BaseRoutingPolicy(ABC):
    """Picks the replica for each request.

    Contract: `select` gets a non-empty list of the replicas that may take the request (dead
    ones already left out) and returns an index into it; it never raises for such a list. It
    may update the policy's own record (cache_aware adds the key to the chosen replica's
    tree), so call it once per request actually sent. A replica unseen before is simply new;
    `remove_worker` forgets one for good.
    """

    name = "base"

    def __init__(self, config: RouterConfig) -> None:
        self.config = config

    @abstractmethod
    def select(self, req: RouteRequest, workers: Sequence[WorkerLoad]) -> int:
        """Index into `workers` of the replica that gets `req`."""

    def remove_worker(self, worker_id: str) -> None:
        """Forget what is recorded about `worker_id`; a no-op for stateless policies."""
        return

    def stats(self) -> dict[str, Any]:
        """Policy state worth reporting (tree sizes, ...), JSON-serialisable."""
        return {}


def make_policy(config: RouterConfig) -> BaseRoutingPolicy:
    """Instantiate `config.router_policy`; ValueError naming the choices when unknown."""
    target = ROUTING_POLICIES.get(config.router_policy)
    if target is None:
        raise ValueError(
            f"router_policy must be one of {tuple(ROUTING_POLICIES)}, got {config.router_policy!r}"
        )
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(config)


def least_loaded(workers: Sequence[WorkerLoad], tie_rank: Sequence[float] | None = None) -> int:
    """Index of the smallest load; ties go to the smallest `tie_rank`, then the first."""
    rank = tie_rank if tie_rank is not None else [0.0] * len(workers)
    return min(range(len(workers)), key=lambda i: (workers[i].load, rank[i], i))
