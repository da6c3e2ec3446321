"""`radixrt bench NAME [ARGS...]` and `python -m radixrt.bench ...`: a door to the benchmarks,
which live in the source checkout's benchmarks/ (outside the wheel). It imports nothing of
them until run; the checkout is the one this radixrt was installed from, or the current one."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

NOT_FOUND = """radixrt bench: the benchmarks live in radixrt's source checkout (benchmarks/,
not in the wheel), and none was found beside this radixrt ({here}) or in the current folder
({cwd}). Run it from the root of a checkout, or install radixrt from one (pip install -e .).
"""


def roots() -> list[Path]:
    """Where a checkout may be: above this package (an editable install), then the cwd."""
    return [Path(__file__).resolve().parents[1], Path.cwd()]


def find_checkout(candidates: list[Path]) -> Path | None:
    for root in candidates:
        if (root / "benchmarks" / "registry.py").is_file():
            return root
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = find_checkout(roots())
    if root is None:
        here = Path(__file__).resolve().parent
        print(NOT_FOUND.format(here=here, cwd=Path.cwd()), end="", file=sys.stderr)
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    sys.argv = ["radixrt bench", *argv]
    try:
        runpy.run_module("benchmarks", run_name="__main__", alter_sys=True)
    except SystemExit as done:  # benchmarks/__main__.py exits with its status
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
        return done.code if isinstance(done.code, int) else int(done.code is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
