"""`python -m benchmarks [NAME [ARGS...]]`: list the benchmarks, or run one by its short
name (`tiers` runs `benchmarks.serving.tiers`; a `_bench` suffix is dropped: `agent` runs
`agent_bench`, whose stem works too); the full module paths work as well."""

from __future__ import annotations

import ast
import re
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = ("serving", "micro")  # searched in this order for a short name
# "`python -m ...` (`make bench`): " at the head of a docstring, dropped from the listing
SUFFIX = "_bench"  # dropped from a module's short name
LEADING_COMMAND = re.compile(r"^`[^`]*`(\s*\([^)]*\))?:\s*")


def benchmarks() -> dict[str, tuple[str, str]]:
    """Short name -> (module, first line of its docstring), for every runnable module."""
    out: dict[str, tuple[str, str]] = {}
    for group in GROUPS:
        for path in sorted((HERE / group).glob("*.py")):
            source = path.read_text()
            if 'if __name__ == "__main__":' not in source:
                continue
            doc = ast.get_docstring(ast.parse(source)) or ""
            name = path.stem.removesuffix(SUFFIX)
            line = LEADING_COMMAND.sub("", doc.split("\n\n")[0].replace("\n", " "))
            out.setdefault(name, (f"benchmarks.{group}.{path.stem}", line))
    return out


def main(argv: list[str]) -> int:
    found = benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        print("python -m benchmarks NAME [ARGS...] runs one of:")
        width = max(len(n) for n in found)
        for name, (module, line) in found.items():
            print(f"  {name:<{width}}  {module}: {line}")
        return 0
    name = argv[0].removesuffix(SUFFIX)
    if name not in found:
        print(f"no benchmark named {name!r}; one of: {', '.join(found)}", file=sys.stderr)
        return 2
    module = found[name][0]
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
