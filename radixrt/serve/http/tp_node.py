"""A host other than node 0 of a multi-node tensor-parallel group: its ranks and no HTTP.

`launch_server --tp N --nnodes M --node-rank k --dist-init-addr host:port` (k > 0) starts
ranks [k*N/M, (k+1)*N/M) and waits. It exits 0 when they all stop normally (rank 0 sent
stop), 1 as soon as one fails; SIGTERM or SIGINT stop them.
"""

from __future__ import annotations

import logging
import signal
import time
from types import FrameType

from radixrt.executor.tp_group import group_secret, report_failure
from radixrt.executor.tp_launch import start_ranks, stop_procs
from radixrt.serve.http.args import ServerArgs

logger = logging.getLogger("radixrt")

_POLL_S = 0.2


def run_tp_node(args: ServerArgs) -> int:
    """Run this node's ranks until they end; returns the exit status."""
    m = args.model
    local = m.tp_size // m.nnodes
    ranks = range(m.node_rank * local, (m.node_rank + 1) * local)
    assert m.dist_init_addr is not None  # ModelConfig requires it when nnodes > 1
    try:
        secret = group_secret(m)
    except ValueError as e:
        logger.error("%s", e)
        return 1
    procs = start_ranks(
        m,
        args.cache,
        args.scheduler.max_running_requests,
        ranks,
        m.dist_init_addr,
        secret,
        args.server.log_level,
    )
    logger.info(
        "node %d of %d: tensor-parallel ranks %d-%d joining %s",
        m.node_rank,
        m.nnodes,
        ranks[0],
        ranks[-1],
        m.dist_init_addr,
    )
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stopping:
            ended = {r: p.returncode for r, p in procs.items() if p.poll() is not None}
            failed = {r: rc for r, rc in ended.items() if rc != 0}
            if failed:
                rank, rc = next(iter(failed.items()))
                reason = (
                    f"tensor-parallel rank {rank} on node {m.node_rank} exited with status {rc}"
                )
                logger.error("%s; stopping this node", reason)
                report_failure(m.dist_init_addr, secret, reason)
                return 1
            if len(ended) == len(procs):
                logger.info("node %d: every rank stopped", m.node_rank)
                return 0
            time.sleep(_POLL_S)
        return 0
    finally:
        stop_procs(procs)
