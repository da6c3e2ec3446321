"""The soak end to end on the tiny model: every kind of request is answered as expected, no
anomaly while the scheduler is paused (SIGSTOP/SIGCONT) now and then, /health stays fast and
the KV pool is whole at the end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak.run import KINDS


@pytest.fixture(scope="module")
def tiny_chat_path(
    tiny_llama_path: Path, smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The tiny model plus SmolLM2's chat template (the chat kinds need one)."""
    path = tmp_path_factory.mktemp("soak_tiny") / "model"
    shutil.copytree(tiny_llama_path, path)
    shutil.copy(smollm2_path / "chat_template.jinja", path / "chat_template.jinja")
    return path


def test_soak_passes_on_the_tiny_model(tiny_chat_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    cmd = [sys.executable, "-m", "benchmarks.soak.run", "--minutes", "0.3", "--threads", "3",
           "--model-path", str(tiny_chat_path), "--json", str(out)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert "PASS KV pool whole" in run.stdout, report
    assert "RESULT: PASS" in run.stdout, report
    figures = json.loads(out.read_text())
    assert figures["anomalies"] == [] and figures["passed"], report
    unserved = [k for k in (*KINDS, "abort_request") if not figures["kinds"].get(k, {}).get("ok")]
    assert not unserved, report
    assert "INFO every kind answered as expected" in run.stdout, report
    pauses = figures["pauses"]  # the scheduler was stopped and continued mid-load
    assert pauses["asked"] and pauses["count"] >= 1 and pauses["pids"], report
