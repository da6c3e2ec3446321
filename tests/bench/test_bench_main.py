"""`python -m benchmarks` and `radixrt bench`: the registry lists every runnable benchmark by
job and runs one by its short name; the table matches the files, so it cannot drift."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import main
from benchmarks.registry import GROUPS, REGISTRY, listing

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _runnable_modules() -> set[str]:
    """Every module under benchmarks/ with a `__main__` guard, but the lister itself."""
    out = set()
    for path in BENCHMARKS.rglob("*.py"):
        if path.name != "__main__.py" and 'if __name__ == "__main__":' in path.read_text():
            out.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return out


def test_every_runnable_module_is_in_the_table_and_nothing_else() -> None:
    modules = [bench.module for bench in REGISTRY.values()]
    assert len(modules) == len(set(modules)), "one module under two names"
    assert set(modules) == _runnable_modules()


def test_every_entry_imports_and_sits_in_its_group_folder() -> None:
    for name, bench in REGISTRY.items():
        assert bench.group in GROUPS, name
        assert bench.module.split(".")[:2] == ["benchmarks", bench.group], name
        assert bench.line and "\n" not in bench.line, name
        importlib.import_module(bench.module)


def test_every_group_has_a_folder_and_a_benchmark() -> None:
    for group in GROUPS:
        assert (BENCHMARKS / group / "__init__.py").is_file(), group
        assert any(bench.group == group for bench in REGISTRY.values()), group


def test_the_listing_is_grouped_by_job_in_order(capsys) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.strip() == listing()
    heads = [out.index(f"\n{group}/ ") for group in GROUPS]
    assert heads == sorted(heads)
    for name, bench in REGISTRY.items():
        at = out.index(f"\n  {name} ")
        group_at = heads[list(GROUPS).index(bench.group)]
        assert group_at < at and all(not group_at < h < at for h in heads), name


def test_unknown_name_exits_2_with_the_list() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "nosuch"], capture_output=True,
                          text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2
    assert "no benchmark named 'nosuch'" in done.stderr and "  tiers " in done.stderr


def test_runs_a_benchmark_with_its_arguments() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "tiers", "--help"],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0 and "--lengths" in done.stdout


def test_an_old_bench_stem_still_names_its_row() -> None:
    assert REGISTRY["agent"].module == "benchmarks.scenarios.agent.bench"
    assert REGISTRY["json"].module == "benchmarks.scenarios.json_bench"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "agent_bench", "--help"],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0 and "--vllm-dtype" in done.stdout


def test_radixrt_bench_runs_one_through_the_door(tmp_path) -> None:
    """From another folder too: the checkout is found above the installed package."""
    cmd = [sys.executable, "-m", "radixrt.cli", "bench", "kv_dtype", "--help"]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "--context" in done.stdout
    listed = subprocess.run(cmd[:4], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert listed.returncode == 0 and listing() in listed.stdout


def test_radixrt_bench_outside_a_checkout_says_so(tmp_path, monkeypatch, capsys) -> None:
    from radixrt import bench

    monkeypatch.setattr(bench, "roots", lambda: [tmp_path])
    assert bench.main(["tiers"]) == 2
    err = capsys.readouterr().err
    assert "source checkout" in err and "pip install -e ." in err


def test_the_door_imports_no_benchmark_until_it_runs() -> None:
    code = (
        "import sys, radixrt.bench, radixrt.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'benchmarks'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
