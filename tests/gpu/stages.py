"""gpu_check's setup stages: env, FlashInfer install and warm-up, the csrc build, pytest -m gpu.

Each stage takes (check, details) and returns a one-line summary; a summary starting with
"skipped" marks it skipped. Heavy imports (torch, flashinfer) happen inside the stages.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.gpu.check import Check

REPO_ROOT = Path(__file__).resolve().parents[2]
GEOMETRIES = ((32, 8, 128), (9, 3, 64))  # (heads, kv heads, head_dim): Llama-3-8B, SmolLM2


def stage_env(c: Check, d: dict[str, Any]) -> str:
    import torch

    from radixrt.model.cuda.build import cuda_home, nvcc_path

    d.update(
        python=sys.version.split()[0],
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        cuda_available=torch.cuda.is_available(),
        nvcc=nvcc_path(),
        cuda_home=str(cuda_home()),
    )
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(
            device=p.name,
            sms=p.multi_processor_count,
            mem_gib=round(p.total_memory / 2**30, 1),
            capability=f"{p.major}.{p.minor}",
        )
    for k, v in d.items():
        c.log(f"  {k}: {v}")
    return f"python {d['python']}, torch {d['torch']}, {d.get('device', 'no CUDA device')}"


def stage_install(c: Check, d: dict[str, Any], args: argparse.Namespace) -> str:
    """Make `import flashinfer` work (pip --target from .whl/), then place prebuilt kernels."""
    version = _flashinfer_version(d)
    how = "already importable"
    if version is None:
        wheels = sorted(args.wheels.glob("*.whl"))
        if c.dry_run:
            names = [w.name for w in wheels] or f"nothing (no wheels in {args.wheels})"
            return f"skipped: dry run; would pip install {names} into {args.site}"
        if not wheels:
            raise RuntimeError(f"flashinfer does not import and {args.wheels} has no wheels")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(args.site),
            *map(str, wheels),
        ]
        c.log("  $", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        c.log(proc.stdout[-2000:], proc.stderr[-2000:])
        proc.check_returncode()
        _add_site(args.site)
        version = _flashinfer_version(d)
        if version is None:
            raise RuntimeError(f"flashinfer still does not import: {d.get('import_error')}")
        how = f"installed into {args.site}"
    copied = _install_prebuilt(c, args.wheels / "aot")
    return f"flashinfer {version} {how}; {copied} prebuilt kernel modules placed"


def stage_build_kernels(c: Check, d: dict[str, Any]) -> str:
    import torch

    from radixrt.model import cuda as kernels
    from radixrt.model.cuda import build

    reason = build.cannot_build_reason()
    if reason is not None:
        if c.dry_run:
            return f"skipped: {reason}"
        raise RuntimeError(reason)
    t0 = time.perf_counter()
    if kernels.get_ops() is None:
        # The pytest and model stages (subprocesses included) use the references at once
        # instead of retrying a build that failed.
        os.environ["RADIXRT_DISABLE_KERNELS"] = "1"
        raise RuntimeError(build.build_error())
    d["build_s"] = time.perf_counter() - t0
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    res, w = torch.randn_like(x), torch.ones(256, device="cuda", dtype=torch.bfloat16)
    x_ref, res_ref = x.clone(), res.clone()
    kernels.fused_add_rmsnorm(x, res, w, 1e-6)
    kernels.reference.fused_add_rmsnorm_ref(x_ref, res_ref, w, 1e-6)
    torch.testing.assert_close(x, x_ref, rtol=2e-2, atol=2e-2)
    where = os.environ.get("TORCH_EXTENSIONS_DIR", "~/.cache/torch_extensions")
    return f"built/loaded in {d['build_s']:.1f}s into {where}; smoke test passed"


def stage_flashinfer_warmup(c: Check, d: dict[str, Any]) -> str:
    """First use of FlashInfer's kernels per head_dim: AOT load, or JIT compile (in parallel)."""
    import torch

    if not torch.cuda.is_available():
        return "skipped: no CUDA device"
    t0 = time.perf_counter()
    d["prebuilt_or_compiled"] = _compile_flashinfer_modules(c)
    d["compile_s"] = time.perf_counter() - t0
    from benchmarks.fixtures.synthetic import SyntheticPools
    from radixrt.model.attention.base import AttentionLayer
    from radixrt.model.attention.flashinfer_backend import FlashInferAttnBackend

    for h, hkv, hd in GEOMETRIES:
        t1 = time.perf_counter()
        layer = AttentionLayer(0, h, hkv, hd, hd**-0.5)
        pools = SyntheticPools(
            num_layers=1,
            num_kv_heads=hkv,
            head_dim=hd,
            capacity=4096,
            max_reqs=8,
            max_context_len=1024,
            dtype=torch.bfloat16,
            device="cuda",
        )
        backend = FlashInferAttnBackend("cuda", num_heads=h, num_kv_heads=hkv, head_dim=hd)
        for lens in (([0, 100], [50, 1]), ([100, 7], [1, 1])):  # extend, then decode
            fb = pools.make_batch(*lens, backend)
            backend.init_forward_metadata(fb)
            t = fb.num_tokens
            q = torch.randn(t, h * hd, device="cuda", dtype=torch.bfloat16)
            kv = torch.randn(t, hkv * hd, device="cuda", dtype=torch.bfloat16)
            backend.forward(q, kv, kv, layer, fb)
        torch.cuda.synchronize()
        d[f"head_dim_{hd}_s"] = time.perf_counter() - t1
    return (
        f"modules ready in {d['compile_s']:.1f}s ({d['prebuilt_or_compiled']}); first runs "
        + ", ".join(f"hd{hd} {d[f'head_dim_{hd}_s']:.1f}s" for _, _, hd in GEOMETRIES)
    )


def stage_pytest(c: Check, d: dict[str, Any], args: argparse.Namespace) -> str:
    default = ["tests/kernels", "tests/attention"] if c.dry_run else ["tests"]
    targets = args.pytest_args.split() if args.pytest_args else default
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-q",
        "-rfEs",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",  # one module needing an absent package stops nothing
        *targets,
    ]
    timeout = max(30.0, min(300.0, c.seconds_left() - 210))  # leave the model stages ~3.5 min
    log_path = c.out_dir / "pytest_gpu.log"
    c.log("  $", " ".join(cmd), f"(timeout {timeout:.0f}s)")
    with open(log_path, "w") as f:
        try:
            rc = subprocess.run(
                cmd, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    c.log("\n".join(lines[-40:]))
    d["returncode"] = rc
    summary = lines[-1] if lines else "no output"
    if rc not in (0, 5):  # 5: nothing collected
        raise RuntimeError(f"pytest exit {rc}: {summary}")
    return summary


# ---- helpers ----------------------------------------------------------------------------


def _flashinfer_version(d: dict[str, Any]) -> str | None:
    for mod in [m for m in sys.modules if m.split(".")[0] in ("flashinfer", "tvm_ffi")]:
        del sys.modules[mod]  # drop half-imported leftovers of a failed attempt
    importlib.invalidate_caches()
    try:
        import flashinfer
    except Exception as e:
        d["import_error"] = f"{type(e).__name__}: {e}"
        return None
    return str(flashinfer.__version__)


def _add_site(site: Path) -> None:
    """Make `site` importable here and in subprocesses (pytest), its scripts runnable."""
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])
    )
    os.environ["PATH"] = os.pathsep.join([str(site / "bin"), os.environ.get("PATH", "")])


def _install_prebuilt(c: Check, aot_src: Path) -> int:
    """Copy prebuilt FlashInfer modules (aot/<name>/<name>.so) where FlashInfer looks first."""
    sos = sorted(aot_src.glob("*/*.so"))
    if not sos:
        return 0
    from flashinfer.jit import env as jit_env  # flashinfer 0.6.x: FLASHINFER_AOT_DIR

    copied = 0
    for so in sos:
        target = Path(jit_env.FLASHINFER_AOT_DIR) / so.parent.name / so.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(so, target)
            copied += 1
        c.log(f"  prebuilt: {target}")
    return copied


def _compile_flashinfer_modules(c: Check) -> str:
    """Build the fa2 bf16 modules for both head dims in parallel unless prebuilt/cached."""
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from flashinfer.jit.attention.modules import gen_batch_prefill_module  # 0.6.x internal API

    bf16 = torch.bfloat16
    specs = [
        gen_batch_prefill_module(
            "fa2", bf16, bf16, bf16, torch.int32, hd, hd, 0, False, False, False
        )
        for _, _, hd in GEOMETRIES
    ]
    todo = [s for s in specs if not s.is_compiled]
    c.log(
        f"  {len(specs) - len(todo)} of {len(specs)} modules already built; compiling {len(todo)}"
    )
    if todo:
        with ThreadPoolExecutor(len(todo)) as pool:
            list(pool.map(lambda s: s.build(), todo))
    return f"{len(specs) - len(todo)} prebuilt/cached, {len(todo)} compiled"
