"""How `python -m benchmarks cpu_peers` starts each system: its command line, environment and
the fields merged into every request (radixrt in each setting, vLLM's CPU build in each dtype,
llama.cpp's `llama-server`, transformers), and whether its program is installed here."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.peers import systems as peers


@dataclass
class Peer:
    """How to start one system; `cmd(port)` is its command line."""

    name: str
    cmd: Any
    env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    backend: str = "openai"
    flush: bool = False


# radixrt's systems: its defaults and the flags of each other setting.
RADIXRT_RUNS: dict[str, tuple[str, ...]] = {
    "radixrt": (),
    "radixrt float32": ("--dtype", "float32"),
    "radixrt bf16": ("--dtype", "bfloat16"),
    "radixrt int8": ("--quantization", "int8"),
}


def make_peers(args: argparse.Namespace) -> dict[str, Peer]:
    from radixrt.model.families.loader import resolve_model_path

    folder = str(resolve_model_path(args.model_path))
    model = ["--model-path", args.model_path] if args.model_path else []
    py = sys.executable
    radixrt = [py, "-m", "radixrt.launch_server", *model, "--host", "127.0.0.1"]
    radixrt += shlex.split(args.radixrt_args)
    no_eos = peers.eos_logit_bias(args.model_path)
    threads = str(args.threads)
    out: dict[str, Peer] = {
        **{
            name: Peer(
                name,
                lambda p, flags=flags: [*radixrt, "--port", str(p), *flags],
                extra={"ignore_eos": True},
                flush=True,
            )
            for name, flags in RADIXRT_RUNS.items()
        },
        **{
            name: Peer(
                name,
                lambda p, dtype=dtype: [
                    str(args.vllm_python),
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--model",
                    folder,
                    "--dtype",
                    dtype,
                    "--enable-prefix-caching",
                    "--max-model-len",
                    "4096",
                    "--served-model-name",
                    "default",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(p),
                ],  # fmt: skip
                env={
                    "VLLM_CPU_KVCACHE_SPACE": "4",
                    "VLLM_CPU_OMP_THREADS_BIND": f"0-{args.threads - 1}",
                    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
                },
                extra={"ignore_eos": True},
            )
            for name, dtype in vllm_runs(args.vllm_dtype)
        },
        "llama-server": Peer(
            "llama-server",
            lambda p: [
                str(args.llama_server),
                "-m",
                str(args.gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(p),
                "--ctx-size",
                str(4096 * args.slots),
                "--",
                "-np",
                str(args.slots),
                "-t",
                threads,
                "-tb",
                threads,
            ],  # fmt: skip
            extra={"ignore_eos": True, **no_eos},
        ),
        "transformers": Peer(
            "transformers",
            lambda p: [py, "-m", "benchmarks.peers.hf_server", *model, "--port", str(p)],
            extra={"ignore_eos": True},
        ),
    }
    chosen = {name: out[name] for name in args.systems if name in out}
    if "vllm-cpu" in args.systems:  # one run per dtype asked for
        chosen.update({name: out[name] for name, _ in vllm_runs(args.vllm_dtype)})
    return chosen


def vllm_runs(dtype: str) -> list[tuple[str, str]]:
    """(system name, --dtype) of each vLLM run: both dtypes by default (the report takes the
    faster per workload as the reference, as a user would pick), else the one asked for."""
    if dtype == "both":
        return [("vllm-cpu bfloat16", "bfloat16"), ("vllm-cpu float32", "float32")]
    return [("vllm-cpu", dtype)]


def available(peer: Peer) -> str | None:
    """Why a peer cannot run here (its program is missing), or None."""
    prog = peer.cmd(0)[0]
    if not Path(prog).exists():
        return f"{prog} not found (make bench-peers installs it)"
    return None
