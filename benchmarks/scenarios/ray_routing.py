"""radixrt on Ray Serve: cache-aware routing against round-robin, and a replica failure.

    python -m benchmarks ray_routing [--model-path P] [--replicas 2] [--groups 3]
                                    [--per-group 8] [--clients 4] [--json OUT]

A local Ray cluster, the application of radixrt/serve/ray/app.py with --replicas servers (each
with cores / replicas torch threads). Chat requests over --groups system prompts of ~500
tokens, interleaved (group i % G), each with a new question, 16 output tokens, sent by
--clients closed-loop clients through Ray's HTTP proxy: hit rate (cached / prompt tokens),
throughput and median TTFT (the whole request) with the cache_aware policy and with
round_robin, each on fresh replicas. Then the failure run: the same workload on cache_aware,
with one replica's radixrt server killed (SIGKILL to its process group) after a quarter of
the requests: how many were served, how many failed (started on the killed server), the
longest request, and how long until Ray had a new replica serving.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from radixrt.model.cpu.build import cpu_flags, cpu_model

WORDS = ("the cache model token prefix server request disk memory page block tree answer "
         "question document user agent tool result value time route replica").split()  # fmt: skip


def _system(seed: int, words: int = 380) -> str:
    rng = random.Random(seed)
    return f"You are assistant {seed}. " + " ".join(rng.choice(WORDS) for _ in range(words))


def _requests(groups: int, per_group: int) -> list[dict[str, Any]]:
    systems = [_system(g) for g in range(groups)]
    out = []
    for i in range(groups * per_group):
        question = f"Question {i}: what is item {i * 7 % 13}?"
        messages = [{"role": "system", "content": systems[i % groups]},
                    {"role": "user", "content": question}]  # fmt: skip
        out.append({"model": "radixrt", "messages": messages, "max_tokens": 16,
                    "temperature": 0, "ignore_eos": True})  # fmt: skip
    return out


def _one(url: str, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    out: dict[str, Any] = {"status": r.status_code, "seconds": time.perf_counter() - t0}
    if r.status_code == 200:
        usage = r.json()["usage"]
        out["prompt"] = usage["prompt_tokens"]
        out["cached"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return out


def _run(url: str, bodies: list[dict[str, Any]], clients: int,
         kill_after: int | None = None) -> dict[str, Any]:  # fmt: skip
    t0 = time.perf_counter()
    killed_at = None
    with ThreadPoolExecutor(clients) as ex:
        futures = [ex.submit(_one, url, b) for b in bodies]
        if kill_after is not None:
            while sum(f.done() for f in futures) < kill_after:
                time.sleep(0.05)
            os.killpg(_servers()[0], signal.SIGKILL)
            killed_at = time.perf_counter()
        results = [f.result() for f in futures]
    elapsed = time.perf_counter() - t0
    ok = [r for r in results if r["status"] == 200]
    out = {"requests": len(bodies), "served": len(ok), "failed": len(bodies) - len(ok),
           "seconds": elapsed, "req_per_s": len(ok) / elapsed,
           "hit_rate": sum(r["cached"] for r in ok) / max(1, sum(r["prompt"] for r in ok)),
           "median_s": statistics.median(r["seconds"] for r in results),
           "max_s": max(r["seconds"] for r in results)}  # fmt: skip
    if killed_at is not None:
        out["recovered_s"] = _wait_replaced(url) - killed_at
    return out


def _servers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "radixrt.launch_server"], capture_output=True, text=True)
    pids = []
    for p in out.stdout.split():  # servers whose parent is a Ray replica's watchdog
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            ppid = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmd[1:3] == [b"-m", b"radixrt.launch_server"] and b"radixrt.serve.ray.child" in parent:
            pids.append(int(p))
    return sorted(pids)


def _wait_replaced(url: str, replicas: int = 2, timeout: float = 300) -> float:
    """When as many servers as replicas run again (the killed one replaced)."""
    from ray import serve

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = serve.status().applications["radixrt"].deployments["radixrt"]
        running = status.replica_states.get("RUNNING", 0)
        if running >= replicas and len(_servers()) >= replicas:
            return time.perf_counter()
        time.sleep(0.2)
    raise RuntimeError("Ray did not replace the killed replica")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-path", default=None)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--groups", type=int, default=3)
    p.add_argument("--per-group", type=int, default=8)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import ray
    from ray import serve

    from radixrt.serve.ray.app import build_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    ray.init(include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    flags = ["--model-path", args.model_path] if args.model_path else []
    threads = max(1, (os.cpu_count() or 1) // args.replicas)
    bodies = _requests(args.groups, args.per_group)
    isa = set(cpu_flags().split()) & {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"}
    results: dict[str, Any] = {"cpu": cpu_model(), "isa": sorted(isa), "replicas": args.replicas}
    try:
        for name, policy, kill in (("cache_aware", "cache_aware", None),
                                   ("round_robin", "round_robin", None),
                                   ("cache_aware, one server killed", "cache_aware",
                                    len(bodies) // 4)):  # fmt: skip
            app = build_app(flags, args.replicas, {"router_policy": policy}, 1.0, threads)
            serve.run(app, name="radixrt", route_prefix="/")
            _one(url, {**bodies[0], "messages": [{"role": "user", "content": "warm up"}]})
            results[name] = _run(url, bodies, args.clients, kill)
            serve.delete("radixrt")
            r = results[name]
            print(f"{name:<31} served {r['served']}/{r['requests']}  hit rate "
                  f"{r['hit_rate']:.3f}  {r['req_per_s']:.2f} req/s  median {r['median_s']:.2f} s"
                  f"  max {r['max_s']:.2f} s"
                  + (f"  replaced after {r['recovered_s']:.1f} s" if "recovered_s" in r else ""),
                  flush=True)  # fmt: skip
    finally:
        serve.shutdown()
        ray.shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
