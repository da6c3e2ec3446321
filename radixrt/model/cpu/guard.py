"""Which of radixrt's C kernels a model runs (`--cpu-kernels`, ModelConfig.cpu_kernels).

"off" runs torch ops; "on" every kernel the library has; "auto" (the default) times each
kernel against the torch op it replaces on the model's own shapes and keeps the faster, so
that on no machine do the kernels make a model slower than torch. Linear layers are judged
twice, at decode sizes (at most DECODE_ROWS rows) and at prefill sizes, and may run the
kernel for one and torch for the other. A kernel is kept unless torch beats it by more than
TIE (the kernels are what lets a decode layer run as one fused call).

With `--quantization int8` or `w8a8` the linear layers always run int8 kernels; with w8a8,
where the library has a W8A8 path (w8a8.py: AMX-INT8 tiles or VNNI), the guard times it
against the weight-only int8 kernel at decode and at prefill sizes (INT8_OPS) and keeps, per
size, the faster.

The timings run once per machine: the plan is kept as JSON under
$RADIXRT_CACHE/kernels/plans/, keyed by the CPU's model and flags, the library's variant and
build, torch's version and thread count, and the shapes (`plan_path`). A plan timed while
other processes took more than BUSY of the cores (core/other_load.py) serves that run only and
is not kept: on 2 busy cores a kernel and its torch op slow down by different factors (an
OpenMP region waits for a descheduled thread), and a kept plan would carry that start's luck
into every later one; the next start times again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from radixrt.core.cache_dir import cache_root
from radixrt.core.other_load import OtherLoad
from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu.timing import Shapes, time_ops
from radixrt.model.cpu.timing_int8 import INT8_OPS, time_w8a8

logger = logging.getLogger("radixrt")

MODES = ("auto", "on", "off")
DECODE_ROWS = 16  # a linear call with at most this many rows is decode-sized
TIE = 1.05
BUSY = 0.1  # others' share of the cores above which a timed plan is not kept
PLAN_VERSION = 3  # 2: decode attention also timed on a batch sharing a prefix; 3: torch's
# copy of bfloat16 weights in float32 where the variant widens them (weight_pack.torch_weight)
OPS = (
    "linear_decode",
    "linear_prefill",
    "rmsnorm",
    "silu_mul",
    "rotary",
    "decode_attention",
    "extend_attention",
)
LINEAR_OPS = frozenset({"linear_decode", "linear_prefill"})
# What a decoder layer needs to run its decode steps as one C call (fused_layer.py).
FUSED_DECODE_OPS = frozenset({"linear_decode", "rmsnorm", "silu_mul", "rotary", "decode_attention"})


@dataclass(frozen=True)
class KernelPlan:
    """The ops that run on the kernels (a subset of OPS) and the library variant they use.
    `KernelPlan()` is the plan of "off": every op on torch."""

    isa: str = "none"
    kernels: frozenset[str] = frozenset()
    # Per timed op: (kernel, torch) seconds, as measured ("auto" only); for INT8_OPS
    # (W8A8, weight-only int8).
    timings: dict[str, tuple[float, float]] = field(default_factory=dict, compare=False)
    w8a8: str = ""  # the W8A8 path of the int8 ops in `kernels` ("amx", "vnni"), else ""
    a8_planes: int = 1  # activation planes of the W8A8 ops (w8a8.linear)
    # Set by runtime.init_cpu_kernels, not kept with the timings: the KV pool's dtype the
    # attention was planned over (its --kv-cache-dtype name) and whether the extend and the
    # decode attention run their kernels of bfloat16 products over it (AMX tiles or VDPBF16PS
    # for extends, VDPBF16PS for decodes: kernels.bf16_extend_takes).
    kv_dtype: str = field(default="float32", compare=False)
    extend_bf16: bool = field(default=False, compare=False)
    decode_bf16: bool = field(default=False, compare=False)

    def uses(self, op: str) -> bool:
        return op in self.kernels

    @property
    def any(self) -> bool:
        return bool(self.kernels)

    @property
    def fuses_decode_layers(self) -> bool:
        return FUSED_DECODE_OPS <= self.kernels

    def attention_options(self) -> dict[str, object]:
        """The "cpu" attention backend's options under this plan: which of its passes run on
        the kernels (the rest on torch_native's code)."""
        return {
            "decode_kernel": self.uses("decode_attention"),
            "extend_kernel": self.uses("extend_attention"),
        }

    def summary(self) -> str:
        """One line: the ISA and which ops run on which path."""
        if not self.kernels:
            return "CPU kernels off: every op on torch"
        on = [op for op in OPS if op in self.kernels]
        off = [op for op in OPS if op not in self.kernels]
        speed = [
            f"{op} {t_torch / t_kernel:.2f}x"
            for op, (t_kernel, t_torch) in self.timings.items()
            if t_kernel > 0 and op not in INT8_OPS
        ]
        line = f"CPU kernels ({self.isa}, {cpu_build.cpu_model()}): kernels for {', '.join(on)}"
        line += f"; torch for {', '.join(off)}" if off else ""
        line += f" (kernel speed-up over torch: {', '.join(speed)})" if speed else ""
        return line + self.attention_summary() + self._int8_summary()

    def attention_summary(self) -> str:
        """The attention passes' paths in their dtypes: which kernel, over which KV dtype."""
        kv = f"{self.kv_dtype} KV"
        if not self.uses("decode_attention"):
            decode = "torch"
        elif self.decode_bf16:
            decode = "VDPBF16PS (bfloat16 QK^T and PV, float32 softmax)"
        else:
            decode = "the kernel (float32 arithmetic)"
        if not self.uses("extend_attention"):
            extend = "torch"
        elif self.extend_bf16:
            on = "AMX tiles" if self.isa == "amx" else "VDPBF16PS"
            extend = f"{on} (bfloat16 QK^T and PV, float32 softmax)"
        else:
            extend = "the float32 kernel"
        return f"; attention: decode on {decode} over {kv}, extend on {extend} over {kv}"

    def _int8_summary(self) -> str:
        """The int8 linear layers' path per size, where the plan is an int8 one."""
        if not LINEAR_OPS <= self.kernels or not (self.w8a8 or self.timings.keys() & INT8_OPS):
            return ""
        parts = []
        for op, size in zip(INT8_OPS, ("decode", "prefill")):
            if op in self.kernels:
                planes = " (two activation planes)" if self.a8_planes == 2 else ""
                parts.append(f"{size} int8 x int8{planes} on {self.w8a8.upper()}")
            else:
                parts.append(f"{size} weight-only int8 (float32 arithmetic)")
            t_a8, t_wo = self.timings.get(op, (0.0, 0.0))
            parts[-1] += f" ({t_wo / t_a8:.2f}x weight-only)" if t_a8 > 0 else ""
        return "; int8 linear layers: " + ", ".join(parts)


def plan_for(
    mode: str,
    shapes: Shapes,
    fixed: frozenset[str] = frozenset(),
    w8a8: str | None = None,
    a8_planes: int = 1,
) -> KernelPlan:
    """The plan of `mode` for a model of these shapes (the library must be available); the
    ops in `fixed` run on the kernels whatever the mode (int8 linear layers: there is no
    torch op to time them against). `w8a8`: the W8A8 path int8 layers may take (None: none),
    with `a8_planes` activation planes, timed against weight-only int8 ("auto") or taken at
    every size ("on")."""
    if mode not in MODES:
        raise ValueError(f"cpu_kernels must be one of {MODES}, got {mode!r}")
    if mode == "off":  # (ModelConfig refuses int8, the one user of `fixed`, with "off")
        return KernelPlan()
    isa = ck.isa()
    ops = frozenset(OPS) if ck.has_extend_attention() else frozenset(OPS) - {"extend_attention"}
    int8_ops = frozenset(INT8_OPS) if w8a8 else frozenset()
    if mode == "on":
        return KernelPlan(isa, ops | int8_ops, w8a8=w8a8 or "", a8_planes=a8_planes)
    path = plan_path(isa, shapes, fixed, w8a8, a8_planes)
    cached = _read(path, ops | int8_ops)
    if cached is not None:
        return cached
    t0, others = time.perf_counter(), OtherLoad()
    timings = time_ops(shapes, ops - fixed, DECODE_ROWS)
    kept = frozenset(op for op, (tk, tt) in timings.items() if tk <= tt * TIE) | fixed
    if w8a8:  # W8A8 against weight-only int8: kept only where faster (no tie to break)
        int8_timings = time_w8a8(shapes, int8_ops, w8a8, a8_planes, DECODE_ROWS)
        kept |= frozenset(op for op, (ta, tw) in int8_timings.items() if ta < tw)
        timings.update(int8_timings)
    plan = KernelPlan(isa, kept, timings, w8a8 or "", a8_planes)
    busy = others.fraction()
    if busy is not None and busy > BUSY:
        logger.warning(
            "CPU kernels timed against torch while other processes used %.0f%% of the cores: "
            "the plan serves this run and is not kept (the next start times again)",
            100 * busy,
        )
        return plan
    _write(path, plan)
    logger.info("CPU kernels timed against torch in %.1f s: %s", time.perf_counter() - t0, path)
    return plan


def plan_path(
    isa: str,
    shapes: Shapes,
    fixed: frozenset[str] = frozenset(),
    w8a8: str | None = None,
    a8_planes: int = 1,
) -> Path:
    """Where the plan for this machine, library, torch and model shapes is kept."""
    cc = cpu_build.compiler() or ""
    key = {
        "version": PLAN_VERSION,
        "cpu": cpu_build.cpu_model(),
        "flags": cpu_build.cpu_flags(),
        "library": cpu_build.library_path(cc, isa).name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "shapes": shapes.key(),
        "fixed": sorted(fixed),
        "decode_rows": DECODE_ROWS,
        "tie": TIE,
    }
    if w8a8:
        key["w8a8"], key["a8_planes"] = w8a8, a8_planes
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cache = cache_root()
    return cache / "kernels" / "plans" / f"{isa}-{digest}.json"


def _read(path: Path, ops: frozenset[str]) -> KernelPlan | None:
    """The plan kept at `path`, or None when there is none or it is unreadable."""
    try:
        data = json.loads(path.read_text())
        kernels = frozenset(data["kernels"])
        timings = {op: (float(t[0]), float(t[1])) for op, t in data["timings"].items()}
        isa = str(data["isa"])
        w8a8, planes = str(data.get("w8a8", "")), int(data.get("a8_planes", 1))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    if not kernels <= ops:
        return None
    return KernelPlan(isa, kernels, timings, w8a8, planes)


def _write(path: Path, plan: KernelPlan) -> None:
    data = {
        "isa": plan.isa,
        "kernels": sorted(plan.kernels),
        "timings": {op: list(t) for op, t in plan.timings.items()},
        "cpu": cpu_build.cpu_model(),
        "w8a8": plan.w8a8,
        "a8_planes": plan.a8_planes,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)  # readers never see a partial file
    except OSError as e:  # an unwritable cache costs a re-measurement next start, no more
        logger.warning("could not keep the CPU kernel plan at %s: %s", path, e)
