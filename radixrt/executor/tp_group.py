"""Rank 0's side of a tensor-parallel group: start the other ranks and watch them.

Process layout for `--tp N` on one host: the process holding rank 0 (the scheduler process,
or the Engine's) starts ranks 1..N-1 as `radixrt.executor.tp_worker` children (tp_launch.py).
With `--nnodes M` each host starts N/M consecutive ranks; node 0 holds rank 0. All ranks meet at
a torch.distributed TCP store that rank 0 serves on `--dist-init-addr` only (else a free port on
127.0.0.1), every key under a prefix derived from the group's secret: for one node made here
unless given, for several given to every node ($RADIXRT_DIST_SECRET or --dist-secret-file).
Local ranks get it in their environment, never in argv.

A rank that exits while the group is up is logged and `on_rank_exit` runs (the scheduler
process exits at once, so the HTTP process notices); children die with their parent.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.executor.tp_launch import (
    NCCL_IFNAME,
    loopback_env,
    start_ranks,
    stop_procs,
    threads_per_rank,
)
from radixrt.model.parallel.comm import (
    SECRET_ENV,
    BaseComm,
    NullComm,
    TorchDistComm,
    connect_store,
    load_secret,
    secret_name,
    serve_store,
)

logger = logging.getLogger("radixrt")

_WATCH_S = 0.2
_STOP_GRACE_S = 2.0  # after stop was broadcast, time for the ranks to leave by themselves
_JOIN_KEY = "radixrt/joined/{}"
# Set by another host's launcher when one of its ranks dies; the key is secret_name(secret,
# _FAILED_KEY), which a client that lists the store's keys still cannot name.
_FAILED_KEY = "radixrt/failed"
_NO_SECRET = (
    f"nnodes > 1 needs the same secret on every node: set ${SECRET_ENV} or --dist-secret-file"
)


class NullTPGroup:
    """tp=1: no other ranks."""

    comm: BaseComm = NullComm()
    # Runs on the watch thread once a rank has died (after the log line). By default nothing
    # more: rank 0's next collective raises. The scheduler process exits instead.
    on_rank_exit: Callable[[str], None] = staticmethod(lambda reason: None)
    procs: dict[int, subprocess.Popen] = {}

    @property
    def pids(self) -> tuple[int, ...]:
        """Process ids of this host's other ranks."""
        return tuple(p.pid for p in self.procs.values())

    def stop(self) -> None:
        """Nothing to stop."""


class TPGroup(NullTPGroup):
    """Rank 0 with its local worker processes; `comm` links all ranks."""

    def __init__(
        self,
        model_config: ModelConfig,
        cache_config: CacheConfig,
        max_running_requests: int,
        device: object,
        log_level: str = "info",
    ) -> None:
        tp, nnodes = model_config.tp_size, model_config.nnodes
        secret = group_secret(model_config)
        store, init_addr = serve_store(model_config.dist_init_addr or "127.0.0.1:0", secret)
        self._store, self._secret = store, secret
        self._stopping = False
        self._added_env: dict[str, str] = {}  # set in os.environ by this group, until stop
        self.comm = NullComm()
        self.procs = start_ranks(
            model_config,
            cache_config,
            max_running_requests,
            range(1, tp // nnodes),
            init_addr,
            secret,
            log_level,
        )
        self._threads = torch.get_num_threads()  # restored at stop (the Engine's process)
        torch.set_num_threads(threads_per_rank(model_config))
        try:
            self._wait_joined(store, tp)
            env = loopback_env(model_config, init_addr)
            nccl = env.pop(NCCL_IFNAME, None)
            if nccl is not None and getattr(device, "type", None) == "cuda":
                # NCCL reads it when it makes its communicator (the first collective): kept
                # until stop.
                self._added_env[NCCL_IFNAME] = os.environ[NCCL_IFNAME] = nccl
            with _env_added(env):  # gloo reads it here only
                self.comm = TorchDistComm(store, 0, tp, device)
        except BaseException:
            self.stop()
            raise
        self._watch = threading.Thread(target=self._watch_ranks, name="tp-watch", daemon=True)
        self._watch.start()

    def stop(self) -> None:
        """Wait briefly for the local ranks to leave (after rank 0 sent them stop), then
        terminate those still running."""
        self._stopping = True
        deadline = time.monotonic() + _STOP_GRACE_S
        while any(p.poll() is None for p in self.procs.values()) and (
            isinstance(self.comm, TorchDistComm) and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        stop_procs(self.procs)
        if isinstance(self.comm, TorchDistComm):
            self.comm.shutdown()
        for name in self._added_env:
            os.environ.pop(name, None)
        torch.set_num_threads(self._threads)

    def _wait_joined(self, store: object, tp: int) -> None:
        keys = [_JOIN_KEY.format(r) for r in range(1, tp)]
        while not store.check(keys):  # type: ignore[attr-defined]
            for rank, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"tensor-parallel rank {rank} exited with status {proc.returncode} "
                        "before joining the group (see its log above)"
                    )
            time.sleep(0.05)

    def _watch_ranks(self) -> None:
        while not self._stopping:
            reason = self._failure()
            if reason is not None and not self._stopping:
                logger.error(reason)
                self.on_rank_exit(reason)
                return
            time.sleep(_WATCH_S)

    def _failure(self) -> str | None:
        for rank, proc in self.procs.items():
            if proc.poll() is not None:
                return (
                    f"tensor-parallel rank {rank} (pid {proc.pid}) exited with status "
                    f"{proc.returncode}; stopping"
                )
        reason = reported_failure(self._store, self._secret)
        return None if reason is None else f"{reason}; stopping"


def group_secret(model_config: ModelConfig) -> str:
    """The secret all ranks share: the one given, else (one node only) a fresh one."""
    secret = load_secret(model_config.dist_secret_file)
    if secret is None and model_config.nnodes > 1:
        raise ValueError(_NO_SECRET)
    return secret or secrets.token_hex(16)


def announce_joined(store: object, rank: int) -> None:
    """A worker rank: tell rank 0 it reached the store."""
    store.set(_JOIN_KEY.format(rank), "1")  # type: ignore[attr-defined]


def report_failure(init_addr: str, secret: str, reason: str) -> None:
    """Another host: tell rank 0 (through the store) that one of this host's ranks died."""
    try:
        store = connect_store(init_addr, secret, timeout=datetime.timedelta(seconds=5))
        store.set(secret_name(secret, _FAILED_KEY), reason)
    except Exception as e:  # noqa: BLE001 - rank 0 may be gone already
        logger.warning("could not report the failure to rank 0: %s", e)


def reported_failure(store: Any, secret: str) -> str | None:
    """Rank 0: the reason another host's report_failure gave, or None while none did."""
    key = secret_name(secret, _FAILED_KEY)
    return store.get(key).decode() if store.check([key]) else None


@contextlib.contextmanager
def _env_added(env: dict[str, str]) -> Iterator[None]:
    """os.environ plus `env` (variables not set before) for the block."""
    os.environ.update(env)
    try:
        yield
    finally:
        for name in env:
            os.environ.pop(name, None)
