"""Communicators for one tensor-parallel group (the null one for tp=1, torch.distributed), and
the rendezvous store its ranks meet at, which listens only where told and needs their secret.

Every rank of a group calls the same collectives in the same order; a collective whose peer
has died raises (gloo) rather than returning partial data.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
from abc import ABC, abstractmethod
from typing import Any

import torch

logger = logging.getLogger("radixrt")

# Workers wait in a broadcast for the next batch while the server is idle, for any length of
# time: the collective timeout must not end that wait. A dead peer is noticed by the process
# watching the ranks (radixrt/model/parallel/group.py), not by this timeout.
_COLLECTIVE_TIMEOUT = datetime.timedelta(days=365)
# The group's shared secret: every node of a multi-node group is given it here (or in the file
# --dist-secret-file names); rank 0 hands its own local ranks theirs here too, never in argv.
SECRET_ENV = "RADIXRT_DIST_SECRET"


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


def load_secret(secret_file: str | None) -> str | None:
    """The shared secret: the file `secret_file` names, else $RADIXRT_DIST_SECRET; None: neither."""
    if secret_file is None:
        return os.environ.get(SECRET_ENV) or None
    try:
        with open(secret_file, encoding="utf-8") as f:
            secret = f.read().strip()
    except OSError as e:
        raise ValueError(f"cannot read dist_secret_file {secret_file!r}: {e}") from e
    if not secret:
        raise ValueError(f"dist_secret_file {secret_file!r} is empty")
    return secret


def secret_name(secret: str, name: str) -> str:
    """`name` plus a tag only holders of `secret` can compute. For a key whose existence is the
    message: any client can list the store's keys (and so learn the prefix), not forge this."""
    tag = hmac.new(secret.encode(), name.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{name}/{tag}"


def serve_store(
    init_addr: str, secret: str, timeout: datetime.timedelta = _COLLECTIVE_TIMEOUT
) -> tuple[Any, str]:
    """Rank 0: serve the rendezvous store on host:port and nowhere else (port 0: a free one).
    Returns the store seen through the secret's prefix and the host:port it listens on."""
    import torch.distributed as dist

    host, port = split_addr(init_addr)
    family, sockaddr = _resolve(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    bound_host, port = sock.getsockname()[:2]
    # From here the store's libuv loop owns the fd and closes it (if the store fails to start,
    # the fd leaks rather than risk closing it twice). TCPStore given only a host and port
    # would listen on every interface.
    fd = sock.detach()
    store = dist.TCPStore(
        bound_host,
        port,
        is_master=True,
        wait_for_workers=False,
        master_listen_fd=fd,
        use_libuv=True,
        timeout=timeout,
    )
    return _with_secret(store, secret), join_addr(host, port)


def connect_store(
    init_addr: str, secret: str, timeout: datetime.timedelta = _COLLECTIVE_TIMEOUT
) -> Any:
    """A rank other than 0: the store rank 0 serves at host:port, seen through the prefix."""
    import torch.distributed as dist

    host, port = split_addr(init_addr)
    store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
    return _with_secret(store, secret)


def is_loopback(init_addr: str) -> bool:
    """Whether host:port's host is (or resolves to) a loopback address."""
    host, port = split_addr(init_addr)
    return ipaddress.ip_address(_resolve(host, port)[1][0]).is_loopback


def split_addr(init_addr: str) -> tuple[str, int]:
    """Split "host:port" or "[v6addr]:port" into (host, port)."""
    host, _, port = init_addr.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def join_addr(host: str, port: int) -> str:
    """The inverse of split_addr."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TorchDistComm(BaseComm):
    """torch.distributed's default group: NCCL on CUDA, gloo on CPU."""

    def __init__(self, store: Any, rank: int, world_size: int, device: torch.device) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank, self.world_size, self.device = rank, world_size, device
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=_COLLECTIVE_TIMEOUT
        )
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


def _with_secret(store: Any, secret: str) -> Any:
    """Every key through a prefix derived from the secret (one way: the secret stays here). A
    client without it that writes the names we and torch use (`radixrt/failed`, gloo's keys)
    writes keys no rank reads."""
    import torch.distributed as dist

    digest = hmac.new(secret.encode(), b"radixrt/prefix", hashlib.sha256).hexdigest()[:32]
    return dist.PrefixStore(f"radixrt/{digest}", store)


def _resolve(host: str, port: int) -> tuple[socket.AddressFamily, tuple]:
    """The address `host` resolves to, IPv4 first: (family, sockaddr)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = min(infos, key=lambda i: i[0] != socket.AF_INET)
    return family, sockaddr
