"""Starting and stopping one host's tensor-parallel rank processes (`radixrt.executor.tp_worker`
children): their arguments, environment (the group's secret, gloo's and NCCL's interface) and
threads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import msgspec

from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.model.parallel.comm import SECRET_ENV, is_loopback

# The interfaces gloo's pair sockets and NCCL's bootstrap and socket transport listen on.
GLOO_IFNAME, NCCL_IFNAME = "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"


class TPWorkerArgsMsg(msgspec.Struct):
    """What rank 0 (or another host's launcher) passes a tp_worker process on its command line
    (JSON; the group's secret travels in its environment instead)."""

    model: ModelConfig
    cache: CacheConfig
    max_running_requests: int
    rank: int
    init_addr: str  # host:port of rank 0's rendezvous (torch.distributed TCP store)
    num_threads: int  # torch CPU threads for this rank
    log_level: str = "info"


def start_ranks(
    model_config: ModelConfig,
    cache_config: CacheConfig,
    max_running_requests: int,
    ranks: range,
    init_addr: str,
    secret: str,
    log_level: str,
) -> dict[int, subprocess.Popen]:
    """Spawn `ranks` as tp_worker processes of this host; returns rank -> process."""
    threads = threads_per_rank(model_config)
    # argv is visible to every user (ps), the environment only to this one.
    env = {**os.environ, SECRET_ENV: secret, **loopback_env(model_config, init_addr)}
    procs = {}
    for rank in ranks:
        args = TPWorkerArgsMsg(
            model_config, cache_config, max_running_requests, rank, init_addr, threads, log_level
        )
        cmd = [
            sys.executable,
            "-m",
            "radixrt.executor.tp_worker",
            msgspec.json.encode(args).decode(),
        ]
        procs[rank] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
    return procs


def threads_per_rank(model_config: ModelConfig) -> int:
    """torch CPU threads for each rank: this host's cores shared among its ranks."""
    local = model_config.tp_size // model_config.nnodes
    return max(1, (os.cpu_count() or 1) // local)


def stop_procs(procs: dict[int, subprocess.Popen], timeout_s: float = 5.0) -> None:
    """Terminate the processes still running, then kill those that outlive `timeout_s`."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in procs.values():
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def loopback_env(model_config: ModelConfig, init_addr: str) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME=lo and NCCL_SOCKET_IFNAME=lo for a one-node group meeting on
    loopback, each unless the user set it: else gloo's pair sockets listen on the address the
    host name resolves to, and NCCL's bootstrap on the first network interface."""
    if model_config.nnodes > 1 or not is_loopback(init_addr):
        return {}
    if "lo" not in {name for _, name in socket.if_nameindex()}:
        return {}
    return {name: "lo" for name in (GLOO_IFNAME, NCCL_IFNAME) if name not in os.environ}
