"""`radixrt kv-size`: how much KV cache a model needs, and how much of it fits on a GPU.

    radixrt kv-size --preset llama-3-70b --context 131072
    radixrt kv-size --model-path /path/to/hf-folder --batch 64 --context 8192 --gpu h100
    radixrt kv-size --model-path model.gguf --kv-dtype fp8 --gpu-memory 80GiB --json

Sizes are printed in GB (1e9 bytes) and GiB (2**30 bytes) side by side.
"""

from __future__ import annotations

import argparse
import json
import re

from radixrt.economics.data import preset_names
from radixrt.economics.kv_bytes import (
    DTYPE_BYTES,
    GB,
    GIB,
    KV_ROW_SCALE_BYTES,
    gpu_memory_bytes,
    gpu_names,
)
from radixrt.economics.kv_size import KvQuery, size_kv
from radixrt.economics.kv_size_report import format_kv_sizing
from radixrt.economics.model_facts import load_facts

_MEMORY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(gb|gib)?\s*$", re.IGNORECASE)


def parse_memory(text: str) -> int:
    """'80' or '80GB' (1e9 bytes each), '80GiB' (2**30): bytes."""
    m = _MEMORY.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size like 80, 80GB or 80GiB, got {text!r}")
    unit = GIB if (m.group(2) or "").lower() == "gib" else GB
    return int(float(m.group(1)) * unit)


def build_parser() -> argparse.ArgumentParser:
    q = KvQuery()
    p = argparse.ArgumentParser(
        prog="radixrt kv-size",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-path", help="a Hugging Face folder (config.json) or a .gguf file")
    model.add_argument("--preset", choices=preset_names(), help="a bundled model's published shape")
    dtypes = sorted(DTYPE_BYTES)
    weights = [d for d in dtypes if d not in KV_ROW_SCALE_BYTES]  # the scaled ones are KV only
    p.add_argument(
        "--dtype", choices=weights, default=q.dtype, help="weights (default %(default)s)"
    )
    scaled = "fp8_e4m3/fp8_e5m2 count radixrt's per-row scales"
    p.add_argument(
        "--kv-dtype", choices=dtypes, default=q.kv_dtype, help=f"default: --dtype; {scaled}"
    )
    p.add_argument("--context", type=int, default=q.context_len, help="tokens per request")
    p.add_argument("--batch", type=int, default=q.batch_size, help="requests")
    p.add_argument("--page-size", type=int, default=q.page_size, help="tokens per KV page")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument(
        "--gpu-memory", type=parse_memory, metavar="GB", help="80 or 80GB (1e9 bytes), 80GiB"
    )
    gpu.add_argument("--gpu", choices=gpu_names(), help="a GPU's memory as it reports it")
    p.add_argument(
        "--mem-fraction-static",
        type=float,
        default=q.mem_fraction,
        help="of GPU memory for weights + KV, as the server's flag (default %(default)s)",
    )
    p.add_argument(
        "--window-kv-fraction",
        type=float,
        default=q.window_kv_fraction,
        help="models with sliding-window layers: window pool slots per full pool slot, as the "
        "server's flag (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        facts = load_facts(args.model_path, args.preset)
        query = KvQuery(
            dtype=args.dtype,
            kv_dtype=args.kv_dtype,
            context_len=args.context,
            batch_size=args.batch,
            page_size=args.page_size,
            mem_fraction=args.mem_fraction_static,
            window_kv_fraction=args.window_kv_fraction,
        )
        memory = gpu_memory_bytes(args.gpu) if args.gpu else args.gpu_memory
        sizing = size_kv(facts, query, memory)
    except (OSError, ValueError) as e:
        p.error(str(e))
    if args.json:
        out = sizing.to_dict()
        if args.gpu:
            out["gpu"]["name"] = args.gpu  # type: ignore[index]
        print(json.dumps(out, indent=2))
    else:
        print(format_kv_sizing(sizing, args.gpu))
    return 0
