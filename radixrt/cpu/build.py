"""Build radixrt's CPU kernels (csrc/cpu/*.c) into one shared library with the system C
compiler and load it with ctypes.

The sources use no torch headers, so a build takes about a second. The library is built for
this machine's CPU (-march=native) into RADIXRT_CACHE/kernels (default ~/.cache/radixrt),
named by a hash of the sources, flags, compiler and CPU flags, and reused by later processes.
It links OpenMP as libgomp.so.1, the soname torch's own OpenMP runtime is loaded under, so the
kernels share torch's thread pool instead of starting a second one. RADIXRT_DISABLE_KERNELS=1
turns the library off; every caller then uses torch.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch  # noqa: F401 - loads torch's libgomp.so.1 before the library is opened

logger = logging.getLogger("radixrt")

CPU_SRC_DIR = Path(__file__).resolve().parents[2] / "csrc" / "cpu"
CPU_SOURCES = (
    "gemm_f32.c",
    "ops_f32.c",
    "attention_f32.c",
    "extend_attention_f32.c",
    "layer_f32.c",
)
CPU_HEADERS = ("rt_cpu.h", "vec_math.h", "attention_rows.h")
CFLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c11")

_build_error: str | None = None

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
# Argument types of every exported function (see csrc/cpu/rt_cpu.h).
SIGNATURES: dict[str, list] = {
    "rt_pack_f32": [_P, _I, _I, _P],
    "rt_linear_f32": [_P, _I, _I, _I, _P, _I, _P, _P, _I],
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
    "rt_extend_attention_f32": [_P, _I, _P, _P, _P, _I, _I, _P, _I, _I, _I, _I, _F],
    "rt_decode_layer_f32": [
        _P,
        _P,
        _I,
        _I,
        _P,
        _P,
        _F,
        *[_P] * 8,
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
    ],
}
RESTYPES = {"rt_extend_attention_f32": ctypes.c_int}  # every other function returns void


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


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def library_path(cc: str) -> Path:
    """Where the library for these sources, flags, compiler and CPU lives in the cache."""
    h = hashlib.sha256()
    for name in (*CPU_SOURCES, *CPU_HEADERS):
        h.update((CPU_SRC_DIR / name).read_bytes())
    h.update(" ".join((cc, *CFLAGS, _cpu_flags())).encode())
    cache = Path(os.environ.get("RADIXRT_CACHE", Path.home() / ".cache" / "radixrt"))
    return cache / "kernels" / f"radixrt_cpu-{h.hexdigest()[:16]}.so"


def build_library(cc: str, out: Path, cflags: tuple[str, ...] = CFLAGS) -> None:
    """Compile the sources into `out` (raises RuntimeError with the compiler's message)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build under a unique name, then rename: concurrent processes never load a partial file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [cc, *cflags, "-I", str(CPU_SRC_DIR), *(str(CPU_SRC_DIR / s) for s in CPU_SOURCES)]
    try:
        proc = subprocess.run([*cmd, "-o", tmp], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_library(path: Path) -> ctypes.CDLL:
    """Open a built library and declare every function's argument types."""
    lib = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, RESTYPES.get(name)
    return lib


@functools.cache
def get_cpu_lib() -> ctypes.CDLL | None:
    """The loaded library with argument types set, or None (reason in `build_error()`)."""
    global _build_error
    reason = cannot_build_reason()
    if reason is not None:
        _build_error = reason
        return None
    cc = compiler()
    assert cc is not None
    try:
        path = library_path(cc)
        if not path.is_file():
            t0 = time.perf_counter()
            build_library(cc, path)
            logger.info("built radixrt CPU kernels in %.1f s: %s", time.perf_counter() - t0, path)
        lib = load_library(path)
    except Exception as e:  # a failed build must never stop the runtime: torch remains
        _build_error = f"{type(e).__name__}: {e}"
        logger.warning("radixrt CPU kernels unavailable, using torch: %s", e)
        return None
    return lib


def build_error() -> str | None:
    """Why the last `get_cpu_lib()` returned None; None if it succeeded or was never called."""
    return _build_error
