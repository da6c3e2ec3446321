"""The GPU check's dry run on CPU: every stage runs or skips cleanly and the reports are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu import check as gpu_check

PYTEST_ARGS = "tests/kernels/test_kernels_gpu.py"  # all skipped without CUDA; keeps it quick


def _run(tmp_path: Path, *extra: str) -> dict[str, dict]:
    out = tmp_path / "out"
    rc = gpu_check.main(["--out", str(out), "--dry-run", "--pytest-args", PYTEST_ARGS, *extra])
    results = {r["name"]: r for r in json.loads((out / "summary.json").read_text())}
    log = (out / "gpu_check.log").read_text()
    assert rc == 0, log[-3000:]
    assert list(results) == [
        "env",
        "install_flashinfer",
        "build_kernels",
        "flashinfer_warmup",
        "pytest_gpu",
        "smollm2_greedy",
        "correctness",
        "bench",
        "shared_prefix",
    ]
    assert all(r["status"] in ("ok", "skip") for r in results.values()), log[-3000:]
    assert "measurement" in log and (out / "pytest_gpu.log").exists()
    return results


def test_dry_run_with_random_model(tmp_path: Path) -> None:
    results = _run(tmp_path, "--smollm2", "random")
    assert results["smollm2_greedy"]["status"] == "ok"
    assert "random-weight" in results["smollm2_greedy"]["details"]["model"]
    rows = results["bench"]["details"]["bench"]
    assert {r["name"] for r in rows} >= {"prefill 32", "decode b4 ctx16"}
    assert all(r["tokens_per_s"] > 0 and r["roofline_tokens_per_s"] > 0 for r in rows)


@pytest.mark.slow
def test_dry_run_through_engine(tmp_path: Path, tiny_llama_path: Path) -> None:
    results = _run(tmp_path, "--smollm2", str(tiny_llama_path))
    details = results["smollm2_greedy"]["details"]
    assert details["model"] == str(tiny_llama_path)
    assert details["common_prefix_lens"] == [4, 4, 4, 4]


def test_stage_failure_is_recorded_and_later_stages_still_run(tmp_path: Path) -> None:
    check = gpu_check.Check(tmp_path, budget_s=60, dry_run=True)

    def boom(c: gpu_check.Check, d: dict) -> str:
        raise RuntimeError("planned failure")

    check.stage("first", boom, min_left_s=0)
    check.stage("second", lambda c, d: "fine", min_left_s=0)
    check.stage("third", lambda c, d: "never", min_left_s=10**6)
    assert check.finish() == 1
    statuses = [(r.name, r.status) for r in check.results]
    assert statuses == [("first", "FAIL"), ("second", "ok"), ("third", "skip")]
    assert "planned failure" in (tmp_path / "gpu_check.log").read_text()


def test_correctness_flags_a_backend_only_beyond_twice_the_bf16_noise() -> None:
    from tests.gpu.correctness import _flags

    def cfg(first: float, decode: float, row_first: float = 0.0) -> dict:
        rows = {"a": {"first_step_err": row_first or first, "decode_err_mean": decode}}
        return {"first_step_err": first, "decode_err": decode, "rows": rows}

    same = {"torch_native_bf16": cfg(0.1, 0.1), "flashinfer_bf16": cfg(0.15, 0.12)}
    assert _flags(same) == []
    assert _flags({**same, "flashinfer_graph": cfg(0.15, 0.5)}) == [
        "flashinfer_graph decode_err 5.00e-01 > 2x flashinfer_bf16's 1.20e-01",
        "flashinfer_graph a decode_err_mean 5.00e-01 vs flashinfer_bf16's 1.20e-01",
    ]
    tiny = {"torch_native_bf16": cfg(1e-4, 1e-4), "flashinfer_bf16": cfg(1e-3, 1e-3)}
    assert _flags(tiny) == []  # under the floors: both are rounding noise
    one_row = {"torch_native_bf16": cfg(0.01, 0.01), "flashinfer_bf16": cfg(0.015, 0.01, 0.2)}
    assert _flags(one_row) == [
        "flashinfer_bf16 a first_step_err 2.00e-01 vs torch_native_bf16's 1.00e-02"
    ]
