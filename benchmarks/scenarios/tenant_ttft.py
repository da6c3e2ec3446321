"""Does another tenant's cache show in time to first token? One server with two tenants.

    python -m benchmarks tenant_ttft [--model-path P] [--rounds 5] [--doc-tokens 1000]

Each round takes a fresh document of about --doc-tokens tokens (numbered sentences, unique per
round, so nothing of it is cached before) and times four requests of one output token each:
tenant A cold, A again (a hit in its namespace), tenant B on A's document (the guess at A's
prompt), and B on another fresh document (cold). Prints the medians and B-on-A over B cold:
1.0 within noise means A's cache tells B nothing; A's hit is the speed B would see if it did.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.micro.roofline import machine_info
from benchmarks.peers.systems import ManagedServer, free_port
from radixrt.serve.web.keys import hash_key

KEYS = {"a": "bench-key-a", "b": "bench-key-b", "ops": "bench-key-ops"}


def document(round_: int, which: str, tokens: int) -> str:
    """About `tokens` tokens of text no other round or tenant uses (~14 tokens a sentence
    with SmolLM2's tokenizer)."""
    return " ".join(f"{which}{round_} fact {i}: item {i} is kept." for i in range(tokens // 14))


def timed(url: str, who: str, text: str) -> tuple[float, int]:
    """(seconds to the first output token, cached prompt tokens)."""
    body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    auth = {"Authorization": f"Bearer {KEYS[who]}"}
    t0 = time.perf_counter()
    r = httpx.post(url + "/generate", json=body, headers=auth, timeout=300)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed, r.json()["meta_info"]["cached_tokens"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    machine = machine_info()  # the server is this benchmark's load: no others' share here
    tmp = Path(tempfile.mkdtemp(prefix="radixrt-tenants-"))
    keys = [{"key": hash_key(k), "tenant": t, "role": "admin" if t == "ops" else "user"}
            for t, k in KEYS.items()]  # fmt: skip
    (tmp / "keys.json").write_text(json.dumps({"keys": keys}))
    cmd = [sys.executable, "-m", "radixrt.launch_server", "--port", str(free_port())]
    cmd += ["--api-key-file", str(tmp / "keys.json")]
    if args.model_path:
        cmd += ["--model-path", args.model_path]
    with ManagedServer(cmd, tmp / "server.log", ready_path="/health") as url:
        timed(url, "a", document(-1, "warm", 64))  # first request: start-up costs
        rows: dict[str, list[float]] = {"a_cold": [], "a_hit": [], "b_on_a": [], "b_cold": []}
        cached: dict[str, list[int]] = {k: [] for k in rows}
        for i in range(args.rounds):
            doc, other = document(i, "A", args.doc_tokens), document(i, "B", args.doc_tokens)
            for name, who, text in (
                ("a_cold", "a", doc),
                ("a_hit", "a", doc),
                ("b_on_a", "b", doc),
                ("b_cold", "b", other),
            ):
                seconds, hit = timed(url, who, text)
                rows[name].append(seconds)
                cached[name].append(hit)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print("| request | median TTFT s | min | max | cached tokens |")
    print("|---|---:|---:|---:|---|")
    for k, v in rows.items():
        print(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} | {cached[k]} |")
    print(f"\nB on A's document / B cold: {med['b_on_a'] / med['b_cold']:.2f}")
    print(f"A's hit / A cold: {med['a_hit'] / med['a_cold']:.2f}")
    print(f"load average (1 min) at the start: {machine['load_avg_1m']}")
    return {"machine": machine, "ttft_s": rows, "cached_tokens": cached}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: the bundled SmolLM2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--doc-tokens", type=int, default=1000)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    main()
