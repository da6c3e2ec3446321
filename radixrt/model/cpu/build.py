"""Build radixrt's CPU kernels (csrc/cpu/*.c) into shared libraries with the system C compiler
and load the one for this CPU with ctypes.

The kernels are written once against csrc/cpu/simd.h and built per ISA variant: "amx"
(AVX-512 plus AMX-BF16 tiles for bfloat16 linear layers and AMX-INT8 tiles for W8A8 int8
ones; Xeons since Sapphire Rapids), "avx512bf16" (AVX-512 plus VDPBF16PS for bfloat16 linear
layers, for AMD EPYC Zen 4 and Zen 5), "avx512" (AVX-512F/DQ/BW/VL),
"avx2" (AVX2 + FMA) and "portable" (no vector intrinsics; the only one off x86). A process
uses the best variant its CPU runs (`supported_isas()[0]`), or the one $RADIXRT_CPU_ISA names
(tests force each variant the CPU supports). A variant that does not build falls back to the
next one.

The sources use no torch headers, so a build takes about a second. A library is built into
RADIXRT_CACHE/kernels (default ~/.cache/radixrt), named by a hash of the sources, flags,
compiler and CPU flags, and reused by later processes. It links OpenMP as libgomp.so.1, the
soname torch's own OpenMP runtime is loaded under, so the kernels share torch's thread pool
instead of starting a second one. RADIXRT_DISABLE_KERNELS=1 turns the library off; every
caller then uses torch.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch  # loads torch's libgomp.so.1 before the library is opened

from radixrt.core.cache_dir import cache_root

logger = logging.getLogger("radixrt")

CPU_SRC_DIR = Path(__file__).resolve().parents[3] / "csrc" / "cpu"
CPU_SOURCES = (
    "gemm.c",
    "gemm_amx.c",
    "gemm_bf16dot.c",
    "gemm_q8a8.c",
    "ops_f32.c",
    "attention_f32.c",
    "attention_shared.c",
    "extend_attention_f32.c",
    "extend_attention_amx.c",
    "extend_attention_dot.c",
    "layer_f32.c",
    # the attention sources again over bfloat16 and fp8 (e4m3, e5m2) KV pools (kv.h)
    *(f"{src}_kv{kv}.c" for kv in ("bf16", "e4m3", "e5m2")
      for src in ("attention", "attention_shared", "extend_attention")),
)  # fmt: skip
# Every header of csrc/cpu (the library's cache key hashes them: one left out would let a
# change to it reuse a stale build; tests/kernels/test_cpu_build.py checks the list).
CPU_HEADERS = (
    "rt_cpu.h", "simd.h", "kv.h", "fp8.h", "attention_rows.h", "attention_heads.h", "amx_tiles.h",
    "extend_bf16_layout.h", "bf16_pairs.h", "attention_pairs.h",
)  # fmt: skip
CFLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=c11")
# Best first. On a Zen 5 the avx512bf16 variant's bfloat16 GEMM beat the avx512 panels at 1-64
# rows once its k-pair rows were packed r-major (PAIR_AT in gemm_amx.c); in the engine, prefill
# 1.06x, decode steps level at batch 1 and 8 and 5-10% faster at 16 (docs/benchmarks.md §8).
ISAS = ("amx", "avx512bf16", "avx512", "avx2", "portable")
_AVX512 = ("-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma", "-mf16c")
# Compiler flags of each variant, and the /proc/cpuinfo flags a CPU needs to run it.
ISA_CFLAGS = {
    "amx": (*_AVX512, "-mavx512bf16", "-mamx-tile", "-mamx-bf16", "-mamx-int8"),
    "avx512bf16": (*_AVX512, "-mavx512bf16"),
    "avx512": _AVX512,
    "avx2": ("-mavx2", "-mfma", "-mf16c"),
    "portable": (),
}
_AVX512_FLAGS = frozenset({"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx2", "fma", "f16c"})
ISA_CPU_FLAGS = {
    "amx": _AVX512_FLAGS | {"avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"},
    "avx512bf16": _AVX512_FLAGS | {"avx512_bf16"},
    "avx512": _AVX512_FLAGS,
    "avx2": frozenset({"avx2", "fma", "f16c"}),
    "portable": frozenset(),
}
_X86 = ("x86_64", "amd64", "i686", "i386")

_build_error: str | None = None

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
# Argument types of every exported function (see csrc/cpu/rt_cpu.h).
SIGNATURES: dict[str, list] = {
    "rt_isa": [],
    "rt_pack_f32": [_P, _I, _I, _P],
    "rt_linear_f32": [_P, _I, _I, _I, _P, _I, _P, _P, _I],
    "rt_pack_q8": [_P, _I, _I, _P, _P],
    "rt_linear_q8": [_P, _I, _I, _I, _P, _P, _I, _P, _P, _I],
    "rt_linear_bf16": [_P, _I, _I, _I, _P, _I, _P, _P, _I],
    "rt_linear_bf16_silu": [_P, _I, _I, _I, _P, _I, _P, _P, _I],
    "rt_q8a8_packed_size": [_I, _I],
    "rt_pack_q8a8": [_P, _I, _I, _P],
    "rt_q8a8_path": [],
    "rt_linear_q8a8": [_P, _I, _I, _I, _P, _P, _I, _P, _P, _I, _I, _I],
    "rt_bf16_packed_size": [_I, _I],
    "rt_pack_bf16": [_P, _I, _I, _P],
    "rt_unpack_bf16": [_P, _I, _I, _P],
    "rt_amx_ready": [],
    "rt_rmsnorm_f32": [_P, _I, _P, _I, _P, _I, _I, _F],
    "rt_rotary_f32": [_P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I],
    "rt_silu_mul_f32": [_P, _I, _P, _I, _I, _I],
    "rt_decode_attention_f32": [
        _P,
        _I,
        _P,
        _P,
        _I,
        _P,
        _P,
        _P,
        _P,
        _I,
        _P,
        _P,
        _P,
        _I,
        _I,
        _I,
        _I,
        _I,
        _F,
    ],
    "rt_extend_attention_f32": [_P, _I, _P, _P, _P, _I, _I, _P, _I, _I, _I, _I, _F, _I],
    "rt_decode_layer_f32": [
        _P,
        _P,
        _I,
        _I,
        _P,
        _P,
        _F,
        *[_P] * 12,
        _I,
        _I,
        _I,
        _I,
        *[_P] * 6,
        _I,
        _P,
        _P,
        _F,
        _P,
        _I,
        _I,
        _I,
        _P,
    ],
}
SIGNATURES["rt_store_kv"] = [_P, _P, _I, _P, _P, _P, _I, _I, _I]
SIGNATURES["rt_extend_layer_f32"] = [_P, _P, _I, _P, _P, _F, _P, _P, _P, _P, _I, _P, _P, _I,
                                     _P, _I, _P, _I, _F, _I, _P, _P]  # fmt: skip
KV_SUFFIXES = ("_kvbf16", "_kve4m3", "_kve5m2")  # the attention builds per KV type (kv.h)
for _kv in KV_SUFFIXES:
    SIGNATURES["rt_decode_attention_f32" + _kv] = SIGNATURES["rt_decode_attention_f32"]
    SIGNATURES["rt_extend_attention_f32" + _kv] = SIGNATURES["rt_extend_attention_f32"]
    SIGNATURES["rt_store_kv" + _kv] = SIGNATURES["rt_store_kv"]
SIGNATURES["rt_extend_attention_bf16_kvbf16"] = SIGNATURES["rt_extend_attention_f32"]
SIGNATURES["rt_decode_attention_bf16_kvbf16"] = SIGNATURES["rt_decode_attention_f32"]
# Every other function returns void.
RESTYPES = {
    **{"rt_extend_attention_f32" + kv: ctypes.c_int for kv in ("", *KV_SUFFIXES)},
    "rt_extend_attention_bf16_kvbf16": ctypes.c_int,
    "rt_extend_layer_f32": ctypes.c_int,
    "rt_isa": ctypes.c_char_p,
    "rt_bf16_packed_size": ctypes.c_int64,
    "rt_q8a8_packed_size": ctypes.c_int64,
    "rt_q8a8_path": ctypes.c_int,
    "rt_linear_q8a8": ctypes.c_int,
    "rt_linear_bf16_silu": ctypes.c_int,
    "rt_amx_ready": ctypes.c_int,
}


def compiler() -> str | None:
    """The C compiler to use: $CC, else cc/gcc/clang on PATH; None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def cannot_build_reason() -> str | None:
    """Why the library cannot be built here, or None when it can be tried."""
    if os.environ.get("RADIXRT_DISABLE_KERNELS", "") not in ("", "0"):
        return "RADIXRT_DISABLE_KERNELS is set"
    if compiler() is None:
        return "no C compiler found (set CC or install gcc)"
    missing = [s for s in (*CPU_SOURCES, *CPU_HEADERS) if not (CPU_SRC_DIR / s).is_file()]
    if missing:
        return f"CPU kernel sources missing under {CPU_SRC_DIR}: {missing}"
    return None


@functools.cache
def cpu_flags() -> str:
    """The CPU's flags line from /proc/cpuinfo, else what `platform` says of the CPU."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def supported_isas() -> tuple[str, ...]:
    """The variants this CPU runs, best first (always ends with "portable")."""
    if platform.machine().lower() not in _X86:
        return ("portable",)
    flags = frozenset(cpu_flags().split())
    return tuple(isa for isa in ISAS if ISA_CPU_FLAGS[isa] <= flags)


def requested_isa() -> str:
    """The variant to load: $RADIXRT_CPU_ISA when set (ValueError naming the problem when
    unknown or unsupported here), else the best this CPU runs."""
    name = os.environ.get("RADIXRT_CPU_ISA", "").strip().lower()
    supported = supported_isas()
    if name in ("", "auto"):
        return supported[0]
    if name not in ISAS:
        raise ValueError(f"RADIXRT_CPU_ISA must be auto or one of {ISAS}, got {name!r}")
    if name not in supported:
        missing = sorted(ISA_CPU_FLAGS[name] - frozenset(cpu_flags().split()))
        raise ValueError(
            f"RADIXRT_CPU_ISA={name}: this CPU cannot run it "
            f"({platform.machine()}, missing {missing or 'x86'}); it runs {supported}"
        )
    return name


def cflags(isa: str) -> tuple[str, ...]:
    return (*CFLAGS, *ISA_CFLAGS[isa])


def library_path(cc: str, isa: str) -> Path:
    """Where the library for these sources, flags, compiler and CPU lives in the cache."""
    h = hashlib.sha256()
    for name in (*CPU_SOURCES, *CPU_HEADERS):
        h.update((CPU_SRC_DIR / name).read_bytes())
    h.update(" ".join((cc, *cflags(isa), cpu_flags())).encode())
    cache = cache_root()
    return cache / "kernels" / f"radixrt_cpu-{isa}-{h.hexdigest()[:16]}.so"


def build_library(cc: str, out: Path, flags: tuple[str, ...]) -> None:
    """Compile the sources into `out` (raises RuntimeError with the compiler's message): each
    source to an object on its own compiler process, as many at once as torch's threads here
    (the library's first build is part of a server's first start), then one link."""
    out.parent.mkdir(parents=True, exist_ok=True)
    compile_flags = [f for f in flags if f != "-shared"]
    # Build under unique names, then rename: concurrent processes never load a partial file.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as work:
        objects = [str(Path(work) / f"{Path(src).stem}.o") for src in CPU_SOURCES]
        jobs = [
            [cc, *compile_flags, "-I", str(CPU_SRC_DIR), "-c", str(CPU_SRC_DIR / src), "-o", obj]
            for src, obj in zip(CPU_SOURCES, objects)
        ]
        with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
            list(pool.map(_run, jobs))
        tmp = str(Path(work) / out.name)
        _run([cc, *flags, *objects, "-o", tmp])
        os.replace(tmp, out)


def _run(cmd: list[str]) -> None:
    """One compiler call (a compile or the link); RuntimeError with its message if it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")


def load_library(path: Path) -> ctypes.CDLL:
    """Open a built library and declare every function's argument types."""
    lib = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, RESTYPES.get(name)
    return lib


def get_cpu_lib() -> ctypes.CDLL | None:
    """The library of the requested variant (`requested_isa()`) with argument types set, or
    None (reason in `build_error()`). A variant that fails to build falls back to the next
    one this CPU runs. Resolved once per value of the two environment variables."""
    return _resolve(
        os.environ.get("RADIXRT_DISABLE_KERNELS", ""), os.environ.get("RADIXRT_CPU_ISA", "")
    )


@functools.cache
def _resolve(disable: str, isa_name: str) -> ctypes.CDLL | None:
    del disable, isa_name  # the cache key: both are read again below
    global _build_error
    reason = cannot_build_reason()
    if reason is not None:
        _build_error = reason
        return None
    try:
        isa = requested_isa()
    except ValueError as e:
        _build_error = str(e)
        return None
    return load_isa(isa)


@functools.cache
def load_isa(isa: str) -> ctypes.CDLL | None:
    """The library of one variant, built if needed, or of the next variant when it does not
    build; None when none does (reason in `build_error()`). Cached per variant: each loads
    once per process (ctypes keeps every library's symbols apart)."""
    global _build_error
    cc = compiler()
    assert cc is not None
    supported = supported_isas()
    for candidate in supported[supported.index(isa) :] if isa in supported else (isa,):
        try:
            path = library_path(cc, candidate)
            if not path.is_file():
                t0 = time.perf_counter()
                build_library(cc, path, cflags(candidate))
                logger.info(
                    "built radixrt CPU kernels (%s) in %.1f s: %s",
                    candidate,
                    time.perf_counter() - t0,
                    path,
                )
            lib = load_library(path)
            if candidate == "amx" and lib.rt_amx_ready() != 0:
                raise RuntimeError("the OS does not grant this process AMX tile data")
            return lib
        except Exception as e:  # a failed build must never stop the runtime: torch remains
            _build_error = f"{type(e).__name__}: {e}"
            logger.warning("radixrt CPU kernels (%s) unavailable: %s", candidate, e)
    return None


def build_error() -> str | None:
    """Why the last `get_cpu_lib()` returned None; None if it succeeded or was never called."""
    return _build_error
