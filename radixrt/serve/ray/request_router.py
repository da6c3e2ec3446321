"""`CacheAwareRequestRouter`: Ray Serve's request router running radixrt's routing policies.

Each request the ingress sends to the replicas is `(path, body)`; the router reads the prompt
and the session from it as the standalone router does (serve/placement/route_keys.py: text,
token ids or chat messages; `prompt_cache_key`, `user`; namespaced by `cache_salt`), and asks
the policy (`cache_aware` by default, with its balance thresholds; or round_robin, least_load,
consistent_hash) for one replica, given each replica's requests in flight as Ray counts them.
The chosen replica is the first rank; the others follow as a second rank, so a replica that
refuses (full) or has died does not stall the request. A replica that dies is forgotten by
the policy. Replica health, restarts and scaling are Ray's.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from radixrt.core.config import RouterConfig
from radixrt.serve.placement.policy import BaseRoutingPolicy, WorkerLoad, make_policy
from radixrt.serve.placement.route_keys import route_request


class CacheAwareRequestRouter(FIFOMixin, RequestRouter):
    """`request_router_kwargs`: any RouterConfig field (`router_policy`, `cache_threshold`,
    `balance_abs_threshold`, `balance_rel_threshold`, `max_tree_size`)."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.policy: BaseRoutingPolicy = make_policy(RouterConfig(**kwargs))
        self.routed: dict[str, int] = {}

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        if pending_request is None or len(candidate_replicas) == 1:
            return [candidate_replicas]
        path, body = _path_and_body(pending_request)
        req = route_request(path, body, None)
        cache = self.replica_queue_len_cache
        loads = [WorkerLoad(r.replica_id.unique_id, cache.get(r.replica_id) or 0)
                 for r in candidate_replicas]  # fmt: skip
        idx = self.policy.select(req, loads)
        chosen = candidate_replicas[idx]
        wid = chosen.replica_id.unique_id
        self.routed[wid] = self.routed.get(wid, 0) + 1
        return [[chosen], [r for i, r in enumerate(candidate_replicas) if i != idx]]

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        self.policy.remove_worker(replica_id.unique_id)


def _path_and_body(pending: PendingRequest) -> tuple[str, Any]:
    """The ingress calls `forward(path, body)`; anything else routes with an empty key."""
    args = list(pending.args) + [pending.kwargs.get(k) for k in ("path", "body")]
    path = next((a for a in args if isinstance(a, str)), "")
    body = next((a for a in args if isinstance(a, dict)), None)
    return path, body
