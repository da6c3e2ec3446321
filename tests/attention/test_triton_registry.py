"""How the triton backend is chosen and what happens without it: the registry's default on
CUDA, a clear error when triton is missing, `import radixrt` never importing triton, and every
kernel compiling for sm_90 and sm_80 without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from radixrt.model.attention import ATTENTION_BACKENDS, create_attention_backend, default_backend

REPO_ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, interpret: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_default_backend_falls_back_to_triton_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "triton" in ATTENTION_BACKENDS
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # `import flashinfer` raises
    monkeypatch.setitem(sys.modules, "triton", object())  # importable
    assert default_backend("cuda", torch.bfloat16) == "triton"
    assert default_backend("cuda", "float16") == "triton"
    assert default_backend("cuda", torch.float32) == "torch_native"
    assert default_backend("cpu", torch.bfloat16) == "torch_native"
    monkeypatch.setitem(sys.modules, "triton", None)
    assert default_backend("cuda", torch.bfloat16) == "torch_native"


def test_missing_triton_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)
    for name in [m for m in sys.modules if m.startswith("radixrt.model.attention.triton_kernels")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match="needs the triton package"):
        create_attention_backend("triton", "cuda", num_heads=4, num_kv_heads=2, head_dim=16)


def test_import_radixrt_never_imports_triton() -> None:
    code = (
        "import sys, radixrt, radixrt.serve.engine, radixrt.model.attention,"
        " radixrt.executor.model_runner\n"
        "assert 'triton' not in sys.modules, 'triton imported'\n"
    )
    res = _python(code)
    assert res.returncode == 0, res.stderr


def test_cpu_without_the_interpreter_is_refused() -> None:
    pytest.importorskip("triton")
    code = (
        "from radixrt.model.attention import create_attention_backend\n"
        "try:\n"
        "    create_attention_backend('triton', 'cpu', num_heads=4, num_kv_heads=2, head_dim=16)\n"
        "except ValueError as e:\n"
        "    assert 'TRITON_INTERPRET' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('accepted a CPU device without the interpreter')\n"
    )
    res = _python(code)
    assert res.returncode == 0, res.stderr


def test_every_kernel_compiles_for_sm90_and_sm80() -> None:
    triton = pytest.importorskip("triton")
    if not hasattr(triton, "knobs"):
        pytest.skip("the compile check needs triton >= 3.4")
    res = _python("from radixrt.model.attention.triton_kernels.compile_check import main; main()")
    assert res.returncode == 0, res.stderr[-4000:]
    assert "sm_90: compiled 12 kernels" in res.stdout and "sm_80: compiled 12 kernels" in res.stdout
