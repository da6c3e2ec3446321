"""The one GPU check: `python -m tests.gpu.check --out DIR [--dry-run]`.

Stages run in order, each on its own: a failing stage prints its traceback and the next one
starts. (1) env, (2) install FlashInfer from .whl/ when `import flashinfer` fails, (3) build the
csrc extension, (4) warm FlashInfer's kernels up, (5) `pytest -m gpu`, (6) greedy SmolLM2 through
Engine with flashinfer vs torch_native (when a converted folder exists), (7) correctness: random
models' logits per backend (flashinfer, triton) and with CUDA graphs against a float32
reference, (8) Llama-3-8B-shaped throughput (CUDA graphs on and off; flashinfer, triton,
torch_native) beside the roofline, (9) the shared-prefix workload with the
radix cache on and off. A short table is printed last; DIR gets gpu_check.log, pytest_gpu.log
and summary.json.
`--dry-run` runs the same logic on CPU with tiny sizes (CI runs it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUDGET_S = 480.0  # 8 minutes for everything
# (name, module, function, takes the CLI args, seconds that must be left to start it)
STAGES = (
    ("env", "stages", "stage_env", False, 0),
    ("install_flashinfer", "stages", "stage_install", True, 30),
    ("build_kernels", "stages", "stage_build_kernels", False, 60),
    ("flashinfer_warmup", "stages", "stage_flashinfer_warmup", False, 60),
    ("pytest_gpu", "stages", "stage_pytest", True, 60),
    ("smollm2_greedy", "model_stages", "stage_smollm2", True, 45),
    ("correctness", "correctness", "stage_correctness", False, 45),
    ("bench", "model_stages", "stage_bench", True, 60),
    ("shared_prefix", "shared_prefix", "stage_shared_prefix", False, 45),
)


@dataclass(slots=True)
class StageResult:
    name: str
    status: str  # "ok", "FAIL" or "skip"
    seconds: float
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


class Check:
    """Runs stages against a wall-clock budget and logs to stdout and DIR/gpu_check.log."""

    def __init__(self, out_dir: Path, budget_s: float, dry_run: bool) -> None:
        self.out_dir = out_dir
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.dry_run = dry_run
        self.deadline = time.monotonic() + budget_s
        self.results: list[StageResult] = []
        self._log: TextIO = open(out_dir / "gpu_check.log", "w", buffering=1)  # noqa: SIM115

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, *parts: object) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self._log.write(line + "\n")

    def stage(
        self, name: str, fn: Callable[[Check, dict[str, Any]], str], min_left_s: float
    ) -> None:
        """Run fn(check, details) -> summary; an exception marks the stage FAIL, never stops us."""
        if self.seconds_left() < min_left_s:
            self._record(name, "skip", 0.0, f"only {self.seconds_left():.0f}s left", {})
            return
        self.log(f"\n===== {name} ({self.seconds_left():.0f}s left) =====")
        details: dict[str, Any] = {}
        t0 = time.perf_counter()
        try:
            summary = fn(self, details)
            status = "skip" if summary.startswith("skipped") else "ok"
        except Exception as e:  # every stage is independent: record, print, carry on
            self.log(traceback.format_exc())
            status, summary = "FAIL", f"{type(e).__name__}: {e}"
        self._record(name, status, time.perf_counter() - t0, summary, details)

    def finish(self) -> int:
        """Write summary.json, print the table; exit status 1 if any stage failed."""
        (self.out_dir / "summary.json").write_text(
            json.dumps([asdict(r) for r in self.results], indent=2, default=str)
        )
        self.log("\n" + format_table(self.results))
        self._log.close()
        return 1 if any(r.status == "FAIL" for r in self.results) else 0

    def _record(self, name: str, status: str, seconds: float, summary: str, details: dict) -> None:
        self.results.append(StageResult(name, status, seconds, summary, details))
        self.log(f"----- {name}: {status} in {seconds:.1f}s: {summary}")


def format_table(results: list[StageResult]) -> str:
    """Stage table, then the benchmark rows if any."""
    lines = [f"{'stage':<20} {'status':<6} {'secs':>7}  summary"]
    for r in results:
        lines.append(f"{r.name:<20} {r.status:<6} {r.seconds:>7.1f}  {r.summary[:110]}")
    bench = [row for r in results for row in r.details.get("bench", [])]
    if bench:
        lines.append(
            f"\n{'measurement':<22} {'backend':<17} {'tok/s':>11} {'roofline':>11} "
            f"{'%roof':>6} {'ms/step':>9}"
        )
        for b in bench:
            lines.append(
                f"{b['name']:<22} {b['backend']:<17} {b['tokens_per_s']:>11.1f} "
                f"{b['roofline_tokens_per_s']:>11.1f} {100 * b['fraction']:>5.1f}% "
                f"{b['ms_per_step']:>9.2f}"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the logs and summary.json")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: exercise the logic")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    p.add_argument(
        "--wheels",
        type=Path,
        default=REPO_ROOT / ".whl",
        help="wheels to install when flashinfer is missing (aot/ holds prebuilt kernels)",
    )
    p.add_argument("--site", type=Path, default=Path("/tmp/site"), help="pip --target folder")
    p.add_argument(
        "--smollm2",
        default=None,
        help="converted SmolLM2 folder (default: the first one under .gpu/, else the stage is "
        "skipped); 'random': a random-weight model of its shape",
    )
    p.add_argument(
        "--bench-backends",
        default="flashinfer+graph,flashinfer,triton+graph,triton,torch_native",
        help="'+graph': decode through CUDA graphs",
    )
    p.add_argument("--pytest-args", default=None, help="override the pytest arguments")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check = Check(args.out, args.budget_s, args.dry_run)
    check.log(f"gpu_check: {'DRY RUN on CPU' if args.dry_run else 'GPU run'}; argv={sys.argv[1:]}")
    for name, module, fn, extra, min_left_s in STAGES:
        check.stage(name, _stage_fn(module, fn, args if extra else None), min_left_s)
    return check.finish()


def _stage_fn(
    module: str, fn: str, args: argparse.Namespace | None
) -> Callable[[Check, dict[str, Any]], str]:
    """Import the stage's module when it runs, so an import error fails only that stage."""

    def run(c: Check, d: dict[str, Any]) -> str:
        stage = getattr(importlib.import_module(f"tests.gpu.{module}"), fn)
        return stage(c, d) if args is None else stage(c, d, args)

    return run


if __name__ == "__main__":
    sys.exit(main())
