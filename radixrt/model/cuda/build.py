"""Build and load radixrt's CUDA extension from csrc/ (torch.utils.cpp_extension, JIT, cached).

The extension is built at most once per process, on the first CUDA call that wants it, into
TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions); later processes reuse the build.
Nothing here runs at `import radixrt`. Set RADIXRT_DISABLE_KERNELS=1 to always use the torch
references.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from pathlib import Path
from types import ModuleType

import torch

logger = logging.getLogger("radixrt")

EXT_NAME = "radixrt_kernels"
CSRC_DIR = Path(__file__).resolve().parents[3] / "csrc"
KERNEL_SOURCES = ("store_kv.cu", "fused_add_rmsnorm.cu", "rotary.cu", "kv_indices.cu")
BINDING_SOURCE = "bindings.cpp"
# Machine code for Ampere/Ada (sm_80, also runs on sm_86/89) and Hopper (sm_90), plus sm_90
# PTX that newer GPUs compile at load. bf16 needs sm_80, so older GPUs are not targeted.
CUDA_ARCH_FLAGS = (
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
)
CUDA_CFLAGS = ("-O3", "--expt-relaxed-constexpr", *CUDA_ARCH_FLAGS)

_build_error: str | None = None
_build_seconds: float | None = None


def nvcc_path() -> str | None:
    """The nvcc that would build the extension (CUDA_HOME/bin/nvcc, else PATH), or None."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def cuda_home() -> Path | None:
    """The CUDA toolkit root holding include/cuda_runtime.h, found from CUDA_HOME or nvcc.

    nvcc on PATH may be a wrapper script (/usr/local/bin/nvcc -> /usr/local/cuda-13.0/bin),
    where torch's own guess (two folders above nvcc) has no CUDA headers.
    """
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = nvcc_path()
    if nvcc is not None:
        candidates += [str(Path(nvcc).resolve().parent.parent), _home_from_wrapper(nvcc)]
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if c and (Path(c) / "include" / "cuda_runtime.h").is_file():
            return Path(c)
    return None


def _home_from_wrapper(nvcc: str) -> str | None:
    """For a tiny shell wrapper that execs the real nvcc, that nvcc's toolkit root."""
    try:
        text = Path(nvcc).read_text(errors="ignore") if Path(nvcc).stat().st_size < 4096 else ""
    except OSError:
        return None
    for word in text.split():
        if word.endswith("/bin/nvcc") and Path(word).is_file():
            return str(Path(word).parent.parent)
    return None


def cannot_build_reason() -> str | None:
    """Why the extension cannot be built here, or None when it can be tried."""
    if os.environ.get("RADIXRT_DISABLE_KERNELS", "") not in ("", "0"):
        return "RADIXRT_DISABLE_KERNELS is set"
    if torch.version.cuda is None:
        return "torch is a CPU-only build"
    if nvcc_path() is None or cuda_home() is None:
        return "no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH)"
    missing = [s for s in (*KERNEL_SOURCES, BINDING_SOURCE) if not (CSRC_DIR / s).is_file()]
    if missing:
        return f"CUDA sources missing under {CSRC_DIR}: {missing}"
    return None


@functools.cache
def get_ops() -> ModuleType | None:
    """The built extension module, or None (reason in `build_error()`); built once per process."""
    global _build_error, _build_seconds
    reason = cannot_build_reason()
    if reason is not None:
        _build_error = reason
        return None
    from torch.utils import cpp_extension

    home = cuda_home()
    torch_home = cpp_extension.CUDA_HOME
    if torch_home is None or not (Path(torch_home) / "include" / "cuda_runtime.h").is_file():
        # torch guessed the folder two levels above a wrapper nvcc; point it at the toolkit.
        os.environ["CUDA_HOME"] = str(home)
        cpp_extension.CUDA_HOME = str(home)
    t0 = time.perf_counter()
    try:
        ops = cpp_extension.load(
            name=EXT_NAME,
            sources=[str(CSRC_DIR / s) for s in (*KERNEL_SOURCES, BINDING_SOURCE)],
            extra_cflags=["-O3"],
            extra_cuda_cflags=list(CUDA_CFLAGS),
            extra_include_paths=[str(CSRC_DIR)],
            verbose=os.environ.get("RADIXRT_KERNELS_VERBOSE", "") not in ("", "0"),
        )
    except Exception as e:  # a failed build must never stop the runtime: references remain
        _build_error = f"{type(e).__name__}: {e}"
        logger.warning("radixrt CUDA kernels unavailable, using torch references: %s", e)
        return None
    _build_seconds = time.perf_counter() - t0
    logger.info("radixrt CUDA kernels ready in %.1f s", _build_seconds)
    return ops


def build_error() -> str | None:
    """Why the last `get_ops()` returned None; None if it succeeded or was never called."""
    return _build_error


def build_seconds() -> float | None:
    """Wall time of the successful build (or cache load) in this process, else None."""
    return _build_seconds
