"""Start-up and shut-down of the server: scheduler process first, then uvicorn on uvloop.

Exit status: 0 after a normal stop, 1 when the scheduler fails to start or dies. SIGTERM and
SIGINT let running requests finish for up to `drain_timeout_s`, then stop the scheduler
cleanly (StopMsg: its disk tier writes what is queued, for up to `disk_drain_timeout_s`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radixrt.core.heap import freeze_startup_heap
from radixrt.serve.http.args import ServerArgs, served_model_name
from radixrt.serve.http.scheduler_client import SchedulerClient, SchedulerStartError

if TYPE_CHECKING:
    import uvicorn

    from radixrt.core.messages import ReadyMsg
    from radixrt.serve.http.tokenizer_manager import TokenizerManager

logger = logging.getLogger("radixrt")

_ABORT_GRACE_S = 5  # after aborting at the drain deadline, time for the answers to go out


def run_server(args: ServerArgs) -> int:
    """Serve until stopped; returns the process exit status."""
    level = args.server.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s")
    if args.model.node_rank > 0:  # tensor-parallel ranks of another host; no HTTP server
        from radixrt.serve.http.tp_node import run_tp_node

        return run_tp_node(args)
    try:
        import uvloop
    except ImportError:  # Windows: plain asyncio
        return asyncio.run(_serve(args))
    return uvloop.run(_serve(args))


def dtypes_text(ready: ReadyMsg) -> str:
    """'weights bfloat16, activations float32, KV bfloat16', or 'float32' where all agree."""
    weights, kv = ready.weight_dtype or ready.dtype, ready.kv_dtype or ready.dtype
    if weights == kv == ready.dtype:
        return ready.dtype
    return f"weights {weights}, activations {ready.dtype}, KV {kv}"


def kv_pool_text(ready: ReadyMsg) -> str:
    """'KV pool 4096 tokens (0.09 GiB)', with the window pool where there is one."""
    window = ""
    if ready.window_pool_tokens:
        window = (
            f" + window pool {ready.window_pool_tokens} tokens for "
            f"{ready.num_window_layers} sliding-window layers"
        )
    gib = ready.kv_pool_bytes / 2**30
    return f"KV pool {ready.max_total_tokens} tokens{window} ({gib:.2f} GiB)"


async def _serve(args: ServerArgs) -> int:
    # What the checks before the scheduler starts need; the rest (torch and transformers
    # for the tokenizer, the app) is imported while it loads the model.
    from radixrt.serve.http.dp_dispatcher import DataParallelManager, replica_envs
    from radixrt.serve.http.request_log import open_request_log
    from radixrt.serve.http.tenancy import Tenancy

    try:
        envs = replica_envs(args)
        tenancy = Tenancy.from_config(args.server)  # a key file that cannot be used stops us
        log = open_request_log(args.server)  # so does a request log that cannot be written
    except ValueError as e:
        logger.error("%s", e)
        return 1
    clients = [SchedulerClient(args, env) for env in envs]  # one per --dp replica
    try:
        for client in clients:
            client.start()
        given = args.model.model_path
        preload = asyncio.create_task(asyncio.to_thread(_preload_tokenizer, given))
        import uvicorn

        from radixrt.model.families.loader import load_tokenizer
        from radixrt.serve.http.dashboard import DashboardRecorder
        from radixrt.serve.http.http_server import create_app
        from radixrt.serve.http.metrics import Metrics, NoMetrics
        from radixrt.serve.http.tokenizer_manager import TokenizerManager
        from radixrt.serve.placement.policy import make_policy

        try:
            readies = [await client.wait_ready() for client in clients]
        except SchedulerStartError as e:
            logger.error("the scheduler could not start: %s", e)
            await asyncio.gather(preload, return_exceptions=True)  # (its thread ends first)
            return 1
        preloaded = await preload
        ready = readies[0]
        tokenizer = (
            preloaded[1]
            if preloaded is not None and preloaded[0] == Path(ready.model_path)
            else load_tokenizer(Path(ready.model_path))
        )
        k = args.scheduler.speculative_num_draft_tokens
        metrics = Metrics(served_model_name(args), k) if args.server.enable_metrics else NoMetrics()
        recorder = DashboardRecorder(spec_draft_tokens=k)  # /dashboard's history, always
        observers = [recorder, tenancy.usage, log]
        managers = [
            TokenizerManager(c, tokenizer, r, args.server, metrics, observers)
            for c, r in zip(clients, readies)
        ]
        tm = (
            managers[0]
            if len(managers) == 1
            else DataParallelManager(managers, make_policy(args.router))
        )

        async def on_shutdown() -> None:
            await tm.close()
            log.close()
            for client in clients:  # every replica drains its disk writes at the same time
                client.request_stop()
            for client in clients:
                client.stop()  # before uvicorn re-raises a captured SIGTERM

        app = create_app(tm, args, tenancy, on_shutdown, recorder)
        freeze_startup_heap("http")  # the tokenizer, the app and its routes are built
        s = args.server
        uvicorn_level = "debug" if s.log_level == "debug" else "warning"
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=s.host,
                port=s.port,
                log_config=None,
                log_level=uvicorn_level,
                access_log=False,
                # Requests still running at the drain deadline are aborted (see _drain); this is
                # the hard stop for connections that still have not finished after that.
                timeout_graceful_shutdown=math.ceil(s.drain_timeout_s) + _ABORT_GRACE_S,
            )
        )
        exit_code = 0

        def on_dead(reason: str) -> None:
            nonlocal exit_code
            exit_code = 1
            server.should_exit = True

        tm.start(on_dead)
        line = (
            f"serving {app.state.model_name} ({ready.device}; {dtypes_text(ready)}); "
            f"{kv_pool_text(ready)}; http://{s.host}:{s.port}"
        )
        if len(clients) > 1:
            line += f"; {len(clients)} replicas, {args.router.router_policy} routing"
        helpers = [
            asyncio.create_task(_announce(server, line)),
            asyncio.create_task(_drain(server, tm, s.drain_timeout_s)),
        ]
        await server.serve()
        for task in helpers:
            task.cancel()
        return exit_code
    finally:
        for client in clients:
            client.stop()


def _preload_tokenizer(model_path: str | None) -> tuple[Path, Any] | None:
    """While the scheduler loads the model: import transformers, and load the tokenizer of a
    model given as a folder ((folder, tokenizer); None otherwise, or when it cannot be
    loaded: the scheduler's ReadyMsg names the folder, and that one is loaded then). Seconds
    saved on start-up."""
    from transformers import AutoTokenizer  # noqa: F401

    from radixrt.model.families.loader import load_tokenizer

    folder = None if model_path is None else Path(model_path).expanduser()
    if folder is None or not folder.is_dir():
        return None
    try:
        return folder, load_tokenizer(folder)
    except Exception:  # the scheduler reports a bad folder, with the reason
        return None


async def _drain(server: uvicorn.Server, tm: TokenizerManager, drain_timeout_s: float) -> None:
    """Once uvicorn starts shutting down, give running requests `drain_timeout_s`, then abort
    the rest so their clients still get an answer (finish_reason abort)."""
    while not server.should_exit:
        await asyncio.sleep(0.1)
    await asyncio.sleep(drain_timeout_s)
    if tm.states:
        logger.warning("drain timeout: aborting %d requests", len(tm.states))
        tm.abort_all()


async def _announce(server: uvicorn.Server, line: str) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    logger.info(line)
