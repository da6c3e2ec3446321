"""Communicators for one tensor-parallel group: the null one for tp=1 and torch.distributed.

Every rank of a group calls the same collectives in the same order; a collective whose peer
has died raises (gloo) rather than returning partial data.
"""

from __future__ import annotations

import datetime
import logging
from abc import ABC, abstractmethod
from typing import Any

import torch

logger = logging.getLogger("radixrt")

# Workers wait in a broadcast for the next batch while the server is idle, for any length of
# time: the collective timeout must not end that wait. A dead peer is noticed by the process
# watching the ranks (radixrt/distributed/group.py), not by this timeout.
_COLLECTIVE_TIMEOUT = datetime.timedelta(days=365)


class BaseComm(ABC):
    """The collectives a model shard needs. `rank` 0 holds the scheduler."""

    rank: int
    world_size: int

    @abstractmethod
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over ranks in place and return it (same shape on every rank)."""

    @abstractmethod
    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's x (..., n) along the last dim, rank order: (..., n * size)."""

    @abstractmethod
    def broadcast(self, x: torch.Tensor) -> torch.Tensor:
        """Overwrite x with rank 0's x in place (shape and dtype must agree) and return it."""

    @abstractmethod
    def min_int(self, value: int) -> int:
        """The smallest `value` over ranks."""

    def shutdown(self) -> None:  # noqa: B027 - nothing to release for the null communicator
        """Leave the group; no collective may follow."""


class NullComm(BaseComm):
    """tp=1: one rank; every collective is the identity."""

    rank = 0
    world_size = 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def broadcast(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def min_int(self, value: int) -> int:
        return value


def connect_store(
    init_addr: str, is_master: bool, timeout: datetime.timedelta = _COLLECTIVE_TIMEOUT
) -> Any:
    """The rendezvous key-value store at host:port (rank 0 serves it, the others connect)."""
    import torch.distributed as dist

    host, _, port = init_addr.rpartition(":")
    return dist.TCPStore(host, int(port), is_master=is_master, wait_for_workers=False,
                         timeout=timeout)


class TorchDistComm(BaseComm):
    """torch.distributed's default group: NCCL on CUDA, gloo on CPU."""

    def __init__(self, store: Any, rank: int, world_size: int, device: torch.device) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank, self.world_size, self.device = rank, world_size, device
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=_COLLECTIVE_TIMEOUT)
        logger.info("tensor-parallel rank %d of %d joined (%s)", rank, world_size, backend)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self._dist.all_reduce(x)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        self._dist.all_gather(parts, x)
        return torch.cat(parts, dim=-1)

    def broadcast(self, x: torch.Tensor) -> torch.Tensor:
        self._dist.broadcast(x, src=0)
        return x

    def min_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MIN)
        return int(t.item())

    def shutdown(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
