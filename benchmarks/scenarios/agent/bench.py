"""`python -m benchmarks agent`: an agent workload (a ~3k-token tool list, 10 turns per
session of a forced tool call and its result, 8 concurrent sessions) against radixrt and
vLLM-CPU in one run, on the same machine, with the same requests and max_tokens.

Each engine runs as its own server, started fresh, at its best: radixrt with its defaults;
vLLM-CPU with prefix caching and continuous batching, its Hermes tool parser and auto tool
choice on, both cores, in its faster dtype on this CPU (bfloat16 with AMX tiles, else float32;
`--vllm-dtype both` runs each), with a chat template that renders the tools, calls and results
exactly as radixrt does (the default model's own template has no tools). Sessions are
scripted: turn k's history holds scripted calls and results, so every engine gets the same
request bytes. Turns alternate tool_choice "required" and one named tool. Per engine: time per
turn (p50/p90), cached fraction of prompt tokens per turn, and the share of forced calls whose
arguments fail JSON-schema validation; then ratios against vLLM. `--quick`: radixrt alone,
2 sessions x 2 turns over 4 tools (a smoke test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers import systems as peers
from benchmarks.scenarios.agent.peer import (
    HERMES_CHATML_TEMPLATE,
    best_dtype,
    vllm_command,
    vllm_env,
)
from benchmarks.scenarios.agent.report import format_report
from benchmarks.scenarios.agent.session import TurnRow, Workload, run_session
from benchmarks.scenarios.agent.tools import make_tools

PEERS_DIR = Path(".peers")
VLLM_MAX_LEN = 8192  # the default model's context
START_TIMEOUT_S = 900.0  # vLLM-CPU compiles its graphs at start: minutes on a loaded machine


async def run_workload(url: str, tools: list[dict[str, Any]], wl: Workload) -> list[TurnRow]:
    """All sessions at once, each one turn after another; after one untimed warm-up request
    (no tools, so that nothing of the workload's prompts is cached before it starts)."""
    timeout = httpx.Timeout(900.0)
    limits = httpx.Limits(max_connections=wl.sessions + 1)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        warm = {"model": "default", "messages": [{"role": "user", "content": "Hi"}]}
        (await client.post(url + "/v1/chat/completions", json={**warm, "max_tokens": 4}))
        runs = [run_session(client, url, tools, wl, s) for s in range(wl.sessions)]
        per_session = await asyncio.gather(*runs)
    return [row for rows in per_session for row in rows]


def engines(args: argparse.Namespace, out_dir: Path) -> dict[str, tuple[list[str], dict]]:
    """Engine name -> (command with a {port} placeholder, environment)."""
    from radixrt.model.families.loader import resolve_model_path

    model = ["--model-path", args.model_path] if args.model_path else []
    radixrt = [sys.executable, "-m", "radixrt.launch_server", *model, "--host", "127.0.0.1"]
    out: dict[str, tuple[list[str], dict]] = {}
    if "radixrt" in args.systems:
        out["radixrt"] = ([*radixrt, *args.radixrt_args.split(), "--port", "{port}"], {})
    if "vllm" in args.systems:
        template = out_dir / "vllm-hermes-chatml.jinja"
        template.write_text(HERMES_CHATML_TEMPLATE)
        folder = str(resolve_model_path(args.model_path))
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        dtypes = (
            ["bfloat16", "float32"] if args.vllm_dtype == "both"
            else [best_dtype(flags) if args.vllm_dtype == "auto" else args.vllm_dtype]
        )  # fmt: skip
        for dtype in dtypes:
            cmd = vllm_command(
                args.vllm_python, folder, dtype, 0, template, VLLM_MAX_LEN, args.vllm_strict
            )
            cmd[cmd.index("--port") + 1] = "{port}"
            out[f"vllm-cpu {dtype}"] = (cmd, vllm_env(args.threads, args.vllm_kv_gib))
    return out


def run_engine(
    name: str, cmd: list[str], env: dict, tools: list[dict], wl: Workload, out_dir: Path
) -> dict[str, Any]:
    port = peers.free_port()
    cmd = [str(port) if c == "{port}" else c for c in cmd]
    log = out_dir / f"server-{name.replace(' ', '-')}.log"
    print(f"=== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    try:
        with peers.ManagedServer(cmd, log, env, "/health", START_TIMEOUT_S) as url:
            started = time.perf_counter() - t0
            t1 = time.perf_counter()
            rows = asyncio.run(run_workload(url, tools, wl))
            wall = time.perf_counter() - t1
    except RuntimeError as e:  # an engine that cannot start or serve is reported, not fatal
        print(f"{name} failed: {e}", flush=True)
        return {"engine": name, "error": str(e)[-2000:], "rows": []}
    print(f"{name}: {len(rows)} turns in {wall:.1f} s (start {started:.0f} s)", flush=True)
    return {"engine": name, "wall_s": wall, "rows": [r.as_dict() for r in rows]}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks agent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--systems", nargs="+", choices=["radixrt", "vllm"], help="default: both")
    p.add_argument("--quick", action="store_true", help="radixrt, 2 sessions x 2 turns, 4 tools")
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--tools", type=int, default=16, help="16: ~3k tokens with SmolLM2")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-path", default=None, help="default: the bundled SmolLM2")
    p.add_argument("--radixrt-args", default="", help="more flags for radixrt's server")
    p.add_argument("--vllm-python", type=Path, default=PEERS_DIR / "vllm" / "bin" / "python")
    p.add_argument("--vllm-dtype", default="auto", choices=["auto", "both", "bfloat16", "float32"])
    p.add_argument(
        "--vllm-strict",
        default="parameter",
        choices=["auto", "function", "parameter"],
        help="vLLM's --tool-strict-level; its default, auto, leaves non-strict tools' "
        "arguments unconstrained",
    )
    p.add_argument("--vllm-kv-gib", type=float, default=2.0, help="VLLM_CPU_KVCACHE_SPACE")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--out-dir", type=Path, default=Path("docs/bench/agent"))
    args = p.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that every started server's process group is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.sessions, args.turns, args.tools = 2, 2, 4
    if args.systems is None:
        args.systems = ["radixrt"] if args.quick else ["radixrt", "vllm"]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    wl = Workload(args.sessions, args.turns, args.max_tokens, args.temperature, args.seed)
    tools = make_tools(args.tools, args.seed)
    chosen = engines(args, args.out_dir)
    missing = [f"{name}: {cmd[0]} not found" for name, (cmd, _) in chosen.items()
               if not Path(cmd[0]).exists()]  # fmt: skip
    if missing:  # before anything runs: a half run is no comparison
        raise SystemExit("; ".join(missing) + " (--vllm-python, or --systems radixrt)")
    results = [
        run_engine(name, cmd, env, tools, wl, args.out_dir) for name, (cmd, env) in chosen.items()
    ]
    from benchmarks.peers.cpu import cpu_description

    cpu = cpu_description()
    report = format_report(results, cpu, wl, len(tools))
    print(report)
    out = {"cpu": cpu, "workload": asdict(wl), "tools": len(tools), "results": results}
    (args.out_dir / "results.json").write_text(json.dumps(out, indent=1, default=str))
    (args.out_dir / "report.md").write_text(report + "\n")
    return results


if __name__ == "__main__":
    main()
