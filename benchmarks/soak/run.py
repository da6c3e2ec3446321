"""`python -m benchmarks soak --minutes N`: one server under mixed, partly hostile
load (the kinds in kinds.py) from several client threads, its scheduler paused now and
then (pause.py); reports what was served, every anomaly, /health latency, the server's
RSS, and whether the KV pool is whole once idle."""

from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import random
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.systems import ManagedServer, free_port
from benchmarks.soak.kinds import KINDS
from benchmarks.soak.outcome import TIMEOUT_S, Outcome, SoakContext, abort_rid
from benchmarks.soak.pause import Pauser
from benchmarks.soak.report import (
    BUSY_KEYS,
    RSS_EVERY_S,
    Observed,
    Tally,
    figures,
    format_report,
)
from benchmarks.soak.rss import server_rss

HEALTH_EVERY_S = 1.0
IDLE_TIMEOUT_S = 60.0


class Monitor(threading.Thread):
    """Times GET /health every second (its own connection) and samples the server's RSS every
    RSS_EVERY_S."""

    def __init__(self, url: str, pid: int | None) -> None:
        super().__init__(daemon=True)
        self.url, self.pid = url, pid
        self.stop = threading.Event()
        self.health_s: list[float] = []
        self.health_failures: list[str] = []
        self.rss_series: list[dict[str, int]] = []  # role -> KiB, every RSS_EVERY_S

    def run(self) -> None:
        next_rss = 0.0
        with httpx.Client(timeout=10.0) as client:
            while not self.stop.wait(HEALTH_EVERY_S):
                start = time.perf_counter()
                try:
                    r = client.get(self.url + "/health")
                    if r.status_code != 200:
                        self.health_failures.append(f"{r.status_code}: {r.text[:200]}")
                except httpx.HTTPError as e:
                    self.health_failures.append(f"{type(e).__name__}: {e}")
                self.health_s.append(time.perf_counter() - start)
                if self.pid is not None and time.monotonic() >= next_rss:
                    next_rss = time.monotonic() + RSS_EVERY_S
                    rss = server_rss(self.pid)
                    self.rss_series.append({role: r["kib"] for role, r in rss.items()})


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=1.0, help="of load, after the warm-up")
    p.add_argument("--threads", type=int, default=6, help="client threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-path", default=None, help="default: the server's default model")
    p.add_argument("--port", type=int, default=None, help="default: a free port")
    p.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="passed to the server (repeatable; each is split like a shell line)",
    )
    p.add_argument("--url", default=None, help="use this running server instead of starting one")
    p.add_argument("--json", default=None, help="write every figure to this file")
    p.add_argument("--pause-every-s", type=float, default=8.0,
                   help="SIGSTOP the scheduler this often during the load (0: never; only a "
                   "server this run started)")  # fmt: skip
    p.add_argument(
        "--pause-hold-s",
        type=float,
        default=2.0,
        help="how long each pause lasts (keep it under the stall timeout)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.url is not None:
        return run_soak(args, args.url.rstrip("/"), None)
    cmd = [sys.executable, "-m", "radixrt.launch_server", "--host", "127.0.0.1"]
    cmd += ["--port", str(args.port or free_port())]
    cmd += ["--model-path", args.model_path] if args.model_path is not None else []
    cmd += [a for arg in args.server_arg for a in shlex.split(arg)]
    log = Path(tempfile.mkstemp(prefix="radixrt-soak-", suffix=".log")[1])
    server = ManagedServer(cmd, log)
    with server as url:
        assert server.proc is not None
        status = run_soak(args, url, server.proc)
        died = server.proc.poll() is not None  # before our SIGTERM
    if died:
        print(f"the server exited with {server.proc.returncode}:\n{log.read_text()[-3000:]}")
    print(f"server log: {log}")
    return status


def run_soak(args: argparse.Namespace, url: str, proc: Any) -> int:
    """Warm up, load the server for `args.minutes`, check it; print the report, return 0/1."""
    obs = Observed(url, httpx.get(url + "/get_model_info", timeout=30).json())
    ctx = SoakContext(int(obs.info["context_length"]))
    pid = None if proc is None else proc.pid
    monitor = Monitor(url, pid)
    monitor.start()
    start = time.monotonic()
    warm = random.Random(args.seed)
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        for name, (_, kind) in KINDS.items():
            if not name.startswith("bad_"):
                run_one(name, partial(kind, client, warm, ctx), obs.warmup)
    obs.warmup_s, start = time.monotonic() - start, time.monotonic()
    obs.rss_start = server_rss(pid) if pid is not None else {}
    pauser = None
    if pid is not None and args.pause_every_s > 0 and args.pause_hold_s > 0:
        pauser = Pauser(pid, args.pause_every_s, args.pause_hold_s)
        pauser.start()
    load(args, url, ctx, obs.tally, deadline=start + 60.0 * args.minutes)
    if pauser is not None:
        pauser.stop.set()
        pauser.join()  # every stopped process continued
        obs.pauses = {"asked": True, **dataclasses.asdict(pauser.log)}
    obs.load_s, start = time.monotonic() - start, time.monotonic()
    obs.idle, obs.pool = wait_idle(url)
    obs.idle_wait_s = time.monotonic() - start
    obs.rss_end = server_rss(pid) if pid is not None else {}
    monitor.stop.set()
    monitor.join()
    obs.alive = (proc is None or proc.poll() is None) and _health_ok(url)
    out = figures(args, obs, monitor)
    print(format_report(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0 if out["passed"] else 1


def load(args: argparse.Namespace, url: str, ctx: SoakContext, tally: Tally,
         deadline: float) -> None:  # fmt: skip
    """`args.threads` clients until `deadline`, plus the aborter until they are done."""
    deck = random.Random(args.seed).sample(list(KINDS), len(KINDS))  # every kind runs once first
    loop_args = (url, args.seed, deadline, ctx, deck, tally)
    clients = [threading.Thread(target=client_loop, args=(i, *loop_args))
               for i in range(args.threads)]  # fmt: skip
    stop_aborts = threading.Event()
    aborter = threading.Thread(target=abort_loop, args=(url, ctx, stop_aborts, tally))
    for t in (*clients, aborter):
        t.start()
    for t in clients:
        t.join()
    stop_aborts.set()
    aborter.join()


def client_loop(idx: int, url: str, seed: int, deadline: float, ctx: SoakContext,
                deck: list[str], tally: Tally) -> None:  # fmt: skip
    """One client: kinds from the shared deck while it lasts, then at random by weight."""
    rng = random.Random(f"{seed}:{idx}")
    names, weights = list(KINDS), [w for w, _ in KINDS.values()]
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        while time.monotonic() < deadline:
            try:
                name = deck.pop()  # atomic under the GIL
            except IndexError:
                name = rng.choices(names, weights)[0]
            out = run_one(name, partial(KINDS[name][1], client, rng, ctx), tally)
            if out.note == "ConnectError":  # no server: do not spin
                time.sleep(0.1)


def abort_loop(url: str, ctx: SoakContext, stop: threading.Event, tally: Tally) -> None:
    """Abort each rid the `abort` kind queues, at the time it asked for."""
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        while not (stop.is_set() and ctx.aborts.empty()):
            try:
                rid, at = ctx.aborts.get(timeout=0.1)
            except queue.Empty:
                continue
            time.sleep(max(0.0, at - time.monotonic()))
            run_one("abort_request", partial(abort_rid, client, rid), tally)


def run_one(name: str, send: Callable[[], Outcome], tally: Tally) -> Outcome:
    """Send one request of kind `name`; a transport error or an unreadable answer is an
    anomaly."""
    start = time.perf_counter()
    try:
        out = send()
    except httpx.HTTPError as e:
        out = Outcome(None, False, type(e).__name__, str(e) or repr(e))
    except (ValueError, KeyError, TypeError) as e:  # a body that is not what the API says
        out = Outcome(None, False, "bad answer", f"{type(e).__name__}: {e}")
    tally.add(name, out, time.perf_counter() - start)
    return out


def wait_idle(url: str) -> tuple[bool, dict[str, Any]]:
    """Poll /get_server_info until nothing runs or IDLE_TIMEOUT_S passes: (idle, last info)."""
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while True:
        try:
            info = httpx.get(url + "/get_server_info", timeout=10).json()
        except (httpx.HTTPError, ValueError) as e:
            return False, {"error": f"/get_server_info: {type(e).__name__}: {e}"}
        idle = all(info.get(k, 0) == 0 for k in BUSY_KEYS)
        if idle or time.monotonic() > deadline:
            return idle, info
        time.sleep(0.2)


def _health_ok(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
