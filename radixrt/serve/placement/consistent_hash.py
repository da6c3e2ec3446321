"""`consistent_hash`: sticky sessions. A request with a session key goes to the replica that
owns the key's point on a hash ring; adding or removing a replica moves only the sessions of
the ring arcs it gains or loses. Requests without a session key go to the least loaded.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from radixrt.core.config import RouterConfig
from radixrt.serve.placement.policy import BaseRoutingPolicy, RouteRequest, WorkerLoad, least_loaded

VIRTUAL_NODES = 160  # points per replica on the ring; more points, more even shares


def ring_hash(text: str) -> int:
    """A stable 64-bit hash (Python's hash() changes between processes)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class ConsistentHashPolicy(BaseRoutingPolicy):
    """The ring is rebuilt only when the set of replica ids offered changes."""

    name = "consistent_hash"

    def __init__(self, config: RouterConfig) -> None:
        super().__init__(config)
        self._members: frozenset[str] = frozenset()
        self._points: list[int] = []  # sorted ring positions
        self._owners: list[str] = []  # replica id at each position

    def select(self, req: RouteRequest, workers: Sequence[WorkerLoad]) -> int:
        if req.session is None:
            return least_loaded(workers)
        ids = [w.worker_id for w in workers]
        return ids.index(self.owner(req.session, ids))

    def owner(self, session: str, worker_ids: Sequence[str]) -> str:
        """The replica id among `worker_ids` that owns `session`."""
        members = frozenset(worker_ids)
        if members != self._members:
            self._build(members)
        i = bisect.bisect(self._points, ring_hash(session)) % len(self._points)
        return self._owners[i]

    def _build(self, members: frozenset[str]) -> None:
        ring = sorted(
            (ring_hash(f"{wid}#{v}"), wid) for wid in members for v in range(VIRTUAL_NODES)
        )
        self._members = members
        self._points = [p for p, _ in ring]
        self._owners = [w for _, w in ring]
