"""This machine's limits, measured in the same run as a benchmark: memory bandwidth (a large
tensor copy) and float32 matmul rate, and the prefill/decode rooflines they imply.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from radixrt.core.other_load import OtherLoad

COPY_MIB = 512  # each of the two copy buffers; far above any CPU cache
MATMUL_N = 2048  # square float32 matmul: 17 GFLOP per product
REPEATS = 5


@dataclass(frozen=True, slots=True)
class Roofline:
    """Best-of-N measured rates; the bounds below are what no engine can beat on this machine."""

    copy_gbs: float  # (bytes read + bytes written) / s of a large tensor copy
    read_gbs: float  # bytes / s of a large tensor sum (read only), for reference
    matmul_gflops: float  # in `dtype`, torch's thread count
    dtype: str = "float32"  # the matmul's dtype (the benchmark's model dtype)

    def prefill_tok_s(self, num_params: int) -> float:
        """Prefill bound: matmul rate / (2 * params) tokens/s (attention FLOPs not counted)."""
        return self.matmul_gflops * 1e9 / (2 * num_params)

    def decode_step_s(self, weight_bytes: int, num_params: int, batch_size: int = 1) -> float:
        """Decode bound per step: the weights stream once (at copy bandwidth) or the batch's
        matmuls run at the measured rate, whichever is slower. KV reads are not counted."""
        read = weight_bytes / (self.copy_gbs * 1e9)
        compute = batch_size * 2 * num_params / (self.matmul_gflops * 1e9)
        return max(read, compute)

    def best(self, other: Roofline) -> Roofline:
        """Each rate's better measurement: interference only ever slows a measurement down."""
        return Roofline(
            max(self.copy_gbs, other.copy_gbs),
            max(self.read_gbs, other.read_gbs),
            max(self.matmul_gflops, other.matmul_gflops),
            self.dtype,
        )

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def measure_roofline(
    copy_mib: int = COPY_MIB,
    matmul_n: int = MATMUL_N,
    repeats: int = REPEATS,
    dtype: torch.dtype = torch.float32,
) -> Roofline:
    """Measure bandwidth and matmul rate (in `dtype`) back to back (best of `repeats` each)."""
    copy_gbs, read_gbs = measure_bandwidth(copy_mib, repeats)
    gflops = measure_matmul_gflops(matmul_n, repeats, dtype)
    return Roofline(copy_gbs, read_gbs, gflops, str(dtype).removeprefix("torch."))


def arithmetic_dtype(dtype: str, cpu_kernels: str = "auto") -> torch.dtype:
    """The dtype a CPU model of `dtype` multiplies in, for its matmul probe: `dtype`, except
    that bfloat16 weights on a kernel variant that widens them (not `ck.bf16_dot`) are
    multiplied in float32, by the kernels and by torch's copy alike (`weight_pack.torch_weight`;
    torch's bfloat16 matmul is emulated on such CPUs: about 1 GFLOP/s on an AVX2 EPYC,
    minutes per probe)."""
    from radixrt.model.cpu import kernels as ck

    if dtype == "bfloat16" and cpu_kernels != "off" and ck.available() and not ck.bf16_dot():
        return torch.float32
    return getattr(torch, dtype)


def measure_bandwidth(copy_mib: int = COPY_MIB, repeats: int = REPEATS) -> tuple[float, float]:
    """(copy GB/s counting read + write, read-only GB/s) on float32 buffers of `copy_mib` MiB."""
    n = copy_mib * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.zeros(n, dtype=torch.float32)  # touched: no page faults inside the timing
    dst.copy_(src)
    copy_s = _best(lambda: dst.copy_(src), repeats)
    read_s = _best(lambda: src.sum(), repeats)
    nbytes = src.numel() * src.element_size()
    return 2 * nbytes / copy_s / 1e9, nbytes / read_s / 1e9


def measure_matmul_gflops(
    n: int = MATMUL_N, repeats: int = REPEATS, dtype: torch.dtype = torch.float32
) -> float:
    """GFLOP/s of an (n, n) @ (n, n) product in `dtype`."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(dtype)
    b = torch.randn(n, n, generator=gen).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    torch.mm(a, b, out=out)
    return 2 * n**3 / _best(lambda: torch.mm(a, b, out=out), repeats) / 1e9


def machine_info() -> dict[str, Any]:
    """Cores, torch threads and the 1-minute load average now (above ~1 means shared cores)."""
    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def close_machine_info(machine: dict[str, Any], load: OtherLoad) -> str:
    """Add the load after the run to `machine` (from `machine_info()`); return a line saying it."""
    machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    other = load.fraction()
    machine["other_cpu_fraction"] = None if other is None else round(other, 3)
    share = "unknown" if other is None else f"{100 * other:.0f}%"
    return (
        f"load average (1 min) before {machine['load_avg_1m']}, after "
        f"{machine['load_avg_1m_after']}; other processes used {share} of the "
        f"{machine['cpu_count']} cores during the run"
    )


def format_roofline(
    r: Roofline, num_params: int | None = None, weight_bytes: int | None = None
) -> str:
    """One or two lines: the rates, and the model's rooflines when its size is given."""
    line = (
        f"roofline: copy {r.copy_gbs:.1f} GB/s (read-only {r.read_gbs:.1f} GB/s), "
        f"{r.dtype} matmul {r.matmul_gflops:.1f} GFLOP/s"
    )
    if num_params is None or weight_bytes is None:
        return line
    return line + (
        f"\nmodel: {num_params / 1e6:.1f}M params, {weight_bytes / 1e6:.0f} MB of weights; "
        f"prefill roofline {r.prefill_tok_s(num_params):.0f} tok/s, decode roofline "
        f"{1e3 * r.decode_step_s(weight_bytes, num_params):.1f} ms/step at batch 1"
    )


def add_roofline_args(p: argparse.ArgumentParser) -> None:
    """The measurement sizes, shared by every benchmark that prints a roofline."""
    p.add_argument("--copy-mib", type=int, default=COPY_MIB, help="roofline copy buffer MiB")
    p.add_argument("--matmul-n", type=int, default=MATMUL_N, help="roofline matmul size")


def _best(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> Roofline:
    p = argparse.ArgumentParser(description=__doc__)
    add_roofline_args(p)
    p.add_argument("--repeats", type=int, default=REPEATS)
    args = p.parse_args(argv)
    print(f"machine: {machine_info()}")
    r = measure_roofline(args.copy_mib, args.matmul_n, args.repeats)
    print(format_roofline(r))
    return r


if __name__ == "__main__":
    main()
