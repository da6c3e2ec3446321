"""`python -m benchmarks`: lists every runnable benchmark and runs one by its short name."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.__main__ import benchmarks, main


def test_lists_every_runnable_module(capsys) -> None:
    found = benchmarks()
    assert found["tiers"][0] == "benchmarks.serving.tiers"
    assert found["engine"][0] == "benchmarks.micro.engine"
    assert "clients" not in found  # a helper module, not runnable
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in found)


def test_unknown_name_is_named() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "nosuch"], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 2 and "no benchmark named 'nosuch'" in done.stderr


def test_runs_a_benchmark_with_its_arguments() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "tiers", "--help"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "--lengths" in done.stdout


def test_a_bench_suffix_is_dropped_from_the_short_name() -> None:
    found = benchmarks()
    assert found["agent"][0] == "benchmarks.serving.agent_bench"
    assert found["json"][0] == "benchmarks.serving.json_bench"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "agent_bench", "--help"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "--vllm-dtype" in done.stdout
