"""`python -m radixrt.bench ...`: the benchmarks, which live in the checkout's benchmarks/
(outside the wheel); run from the checkout's root, this is `python -m benchmarks ...`."""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    try:
        import benchmarks  # noqa: F401
    except ImportError:
        sys.exit("radixrt's benchmarks live in its source checkout (benchmarks/): run this "
                 "from the checkout's root")  # fmt: skip
    runpy.run_module("benchmarks", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
