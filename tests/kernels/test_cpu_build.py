"""Building and loading radixrt's CPU kernel library (csrc/cpu): the switch that turns it off,
its cache key, the variant asked for, and every variant compiling without warnings (those
this CPU runs, loaded; the x86 ones it lacks; the portable one for aarch64)."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest
from cpu_variants import variants

from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

STRICT = ("-Wall", "-Wextra", "-Werror")


def test_disable_env_and_cache_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RADIXRT_DISABLE_KERNELS", "1")
    assert cpu_build.cannot_build_reason() == "RADIXRT_DISABLE_KERNELS is set"
    assert not ck.available() and ck.build_error() == "RADIXRT_DISABLE_KERNELS is set"
    monkeypatch.delenv("RADIXRT_DISABLE_KERNELS")
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path))
    cc = cpu_build.compiler()
    assert cc is not None
    path = cpu_build.library_path(cc, "avx2")
    assert path.parent == tmp_path / "kernels" and path.suffix == ".so"
    assert cpu_build.library_path(cc, "portable") != path  # another variant: another library
    monkeypatch.setattr(cpu_build, "CFLAGS", (*cpu_build.CFLAGS, "-DX"))
    assert cpu_build.library_path(cc, "avx2") != path  # other flags: another library


def test_the_cache_key_covers_every_source() -> None:
    """Every C file and header under csrc/cpu is hashed into the library's cache key."""
    on_disk = {p.name for p in cpu_build.CPU_SRC_DIR.iterdir() if p.suffix in (".c", ".h")}
    assert on_disk == {*cpu_build.CPU_SOURCES, *cpu_build.CPU_HEADERS}


def test_unknown_or_unsupported_isa_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RADIXRT_CPU_ISA", "sse9")
    with pytest.raises(ValueError, match="RADIXRT_CPU_ISA must be auto or one of"):
        cpu_build.requested_isa()
    assert not ck.available() and "sse9" in (ck.build_error() or "")
    missing = [i for i in cpu_build.ISAS if i not in cpu_build.supported_isas()]
    if missing:
        monkeypatch.setenv("RADIXRT_CPU_ISA", missing[0])
        with pytest.raises(ValueError, match="this CPU cannot run it"):
            cpu_build.requested_isa()
    monkeypatch.setenv("RADIXRT_CPU_ISA", "auto")
    assert cpu_build.requested_isa() == cpu_build.supported_isas()[0]


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None,
    reason="no aarch64 cross compiler (make cross-cc)",
)
def test_portable_variant_builds_for_arm(tmp_path: Path) -> None:
    """Off x86 only the portable variant exists: it must build for aarch64 (NEON by default)."""
    out = tmp_path / "arm.so"
    cpu_build.build_library("aarch64-linux-gnu-gcc", out, (*cpu_build.cflags("portable"), *STRICT))
    header = out.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


@pytest.mark.skipif(platform.machine().lower() not in cpu_build._X86, reason="x86 variants")
def test_variants_this_cpu_cannot_run_compile_without_warnings(tmp_path: Path) -> None:
    """The x86 variants this CPU lacks (AMX, say) still compile cleanly: CI machines differ,
    and a warning in one variant's build fails its test on the machines that run it."""
    cc = cpu_build.compiler()
    assert cc is not None
    for other in [v for v in cpu_build.ISAS if v not in cpu_build.supported_isas()]:
        cpu_build.build_library(cc, tmp_path / f"{other}.so", (*cpu_build.cflags(other), *STRICT))


@pytest.mark.parametrize("isa", variants(bf16_linear=True))
def test_every_variant_builds_without_warnings(tmp_path: Path, isa: str) -> None:
    cc = cpu_build.compiler()
    assert cc is not None
    cpu_build.build_library(cc, tmp_path / "lib.so", (*cpu_build.cflags(isa), *STRICT))
    assert cpu_build.load_library(tmp_path / "lib.so").rt_isa().decode() == isa
