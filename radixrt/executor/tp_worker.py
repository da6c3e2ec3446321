"""A tensor-parallel rank other than 0: its model shard and KV pool, run batch by batch.

Started as `python -m radixrt.executor.tp_worker '<TPWorkerArgsMsg JSON>'` by the process
that holds rank 0 (or by `launch_server --node-rank k` on another host). It loads its shard,
joins the group, agrees on the KV pool size, then runs every batch rank 0 broadcasts until
rank 0 sends stop (exit 0) or a collective fails because a peer died (exit 1).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

import msgspec

from radixrt.core.heap import freeze_startup_heap
from radixrt.executor.tp_group import announce_joined
from radixrt.executor.tp_launch import TPWorkerArgsMsg

logger = logging.getLogger("radixrt")

_PARENT_POLL_S = 0.5


def run_worker(args: TPWorkerArgsMsg) -> int:
    """Join the group as `args.rank` and run batches until stopped; returns the exit status."""
    import torch

    from radixrt.executor.model_runner import ModelRunner, resolve_device
    from radixrt.model.parallel.comm import SECRET_ENV, TorchDistComm, connect_store

    torch.set_num_threads(args.num_threads)
    secret = os.environ.get(SECRET_ENV)
    if not secret:  # the process that starts the ranks always sets it
        logger.error("tensor-parallel rank %d: no $%s, the group's secret", args.rank, SECRET_ENV)
        return 1
    store = connect_store(args.init_addr, secret)
    announce_joined(store, args.rank)
    comm = TorchDistComm(
        store, args.rank, args.model.tp_size, resolve_device(args.model.device, args.rank)
    )
    try:
        runner = ModelRunner(args.model, args.cache, args.max_running_requests, comm=comm)
        freeze_startup_heap(f"tensor-parallel rank {args.rank}")
        while (desc := runner.batch_link.recv()) is not None:
            runner.forward_desc(desc)
    except Exception as e:  # a peer died, or this rank's shard failed to load
        logger.error("tensor-parallel rank %d stops: %s: %s", args.rank, type(e).__name__, e)
        return 1
    comm.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = msgspec.json.decode(argv[0], type=TPWorkerArgsMsg)
    logging.basicConfig(
        level=args.log_level.upper(), format=f"%(asctime)s tp rank {args.rank}: %(message)s"
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is rank 0's to handle
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    return run_worker(args)


def _exit_with_parent(parent_pid: int) -> None:
    """Exit when the parent (rank 0's process, or another host's launcher) is gone. Polled
    rather than PR_SET_PDEATHSIG, which fires when the spawning *thread* ends: an Engine made
    on a short-lived thread would lose its ranks."""
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_POLL_S)
    logger.error("tensor-parallel rank's parent process %d is gone; exiting", parent_pid)
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
