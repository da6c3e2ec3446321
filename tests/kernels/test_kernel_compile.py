"""Compile csrc/ without a GPU: every .cu with nvcc for sm_90 and sm_80, and the torch binding
with the host compiler (syntax only), so CI catches C++/CUDA errors. Skipped without nvcc/g++."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp_extension

from radixrt.model.cuda.build import BINDING_SOURCE, CSRC_DIR, KERNEL_SOURCES, cuda_home, nvcc_path

# The defines torch.utils.cpp_extension passes to nvcc: the kernels must build under them.
TORCH_NVCC_DEFINES = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
)


def test_every_cu_file_is_listed() -> None:
    assert sorted(p.name for p in CSRC_DIR.glob("*.cu")) == sorted(KERNEL_SOURCES)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("source", KERNEL_SOURCES)
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_cuda_kernel_compiles(source: str, arch: str, tmp_path: Path) -> None:
    cmd = [
        str(nvcc_path()),
        "-c",
        "-std=c++17",
        "-O2",
        f"-arch={arch}",
        "--expt-relaxed-constexpr",
        *TORCH_NVCC_DEFINES,
        "-I",
        str(CSRC_DIR),
        str(CSRC_DIR / source),
        "-o",
        str(tmp_path / f"{source}.o"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "warning" not in proc.stderr.lower(), proc.stderr[-4000:]


@pytest.mark.skipif(cuda_home() is None or shutil.which("g++") is None, reason="needs CUDA and g++")
def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    """Syntax-check bindings.cpp as torch would compile it (CUDA headers from nvcc's toolkit)."""
    cuda_include = Path(str(cuda_home())) / "include"
    includes = [
        *cpp_extension.include_paths(),
        str(cuda_include),
        str(CSRC_DIR),
        sysconfig.get_paths()["include"],
    ]
    torch_include = Path(cpp_extension.include_paths()[0])
    if not (torch_include / "c10/cuda/impl/cuda_cmake_macros.h").exists():
        # CPU builds of torch ship c10/cuda headers but not this generated one.
        stub = tmp_path / "stub/c10/cuda/impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
        includes.insert(0, str(tmp_path / "stub"))
    cmd = [
        "g++",
        "-fsyntax-only",
        "-std=c++20",
        "-DTORCH_EXTENSION_NAME=radixrt_kernels",
        *(f"-I{d}" for d in includes),
        str(CSRC_DIR / BINDING_SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
