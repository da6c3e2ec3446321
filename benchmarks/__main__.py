"""`python -m benchmarks [NAME [ARGS...]]`: list the benchmarks of benchmarks/registry.py by
job, or run one by its short name with its own arguments (`tiers --quick`)."""

from __future__ import annotations

import runpy
import sys

from benchmarks.registry import REGISTRY, listing

SUFFIX = "_bench"  # the old module stems (`agent_bench`, `json_bench`) name their rows too


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(listing())
        return 0
    name = argv[0]
    if name not in REGISTRY:
        name = name.removesuffix(SUFFIX)
    if name not in REGISTRY:
        print(f"no benchmark named {argv[0]!r}\n\n{listing()}", file=sys.stderr)
        return 2
    module = REGISTRY[name].module
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
