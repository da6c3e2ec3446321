"""The import graph: every runtime import points down the floors of docs/architecture.md, and no
module imports itself through a cycle. Imports under `if TYPE_CHECKING:` name types for
annotations only and are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom first. A module may import its own unit and any lower floor; units on one floor may
# not import each other. A unit is a top-level module or package of radixrt (or lang).
FLOORS: list[tuple[str, ...]] = [
    ("radixrt.config", "radixrt.core", "radixrt.lang"),  # lang imports nothing of the runtime
    ("radixrt.messages", "radixrt.text", "radixrt.forward_batch", "radixrt.kernels"),
    ("radixrt.distributed", "radixrt.cache", "radixrt.output"),
    ("radixrt.attention",),
    ("radixrt.layers",),
    ("radixrt.cpu",),  # the float32 CPU fast path; the attention registry names its backend
    ("radixrt.models",),
    ("radixrt.grammar",),
    ("radixrt.executor",),
    ("radixrt.scheduler", "radixrt.routing", "radixrt.economics"),  # economics: models.arch only
    ("radixrt.engine", "radixrt.web"),
    ("radixrt.server",),
    ("radixrt.router", "radixrt.testing", "radixrt.ray"),  # testing: fixtures for tests/
    ("radixrt.launch_server", "radixrt.demo", "radixrt.bench"),
    ("radixrt.cli",),
    ("radixrt",),
]
FLOOR = {unit: i for i, units in enumerate(FLOORS) for unit in units}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "radixrt").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _unit(module: str) -> str:
    """radixrt.<first part>, or radixrt itself for the package's __init__."""
    unit = ".".join(module.split(".")[:2])
    assert unit in FLOOR, f"{module} is on no floor: add {unit} to FLOORS"
    return unit


def _runtime_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of the project that `name` imports at run time (anywhere in the file)."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from pkg import mod` imports the submodule; `from mod import name`, the module.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _runtime_imports(name, path, modules) for name, path in modules.items()}


def test_imports_point_down_the_floors() -> None:
    upward = []
    for name, targets in _graph().items():
        unit = _unit(name)
        for target in targets:
            other = _unit(target)
            if other != unit and FLOOR[other] >= FLOOR[unit]:
                upward.append(
                    f"{name} -> {target} ({unit} floor {FLOOR[unit]}, {other} floor {FLOOR[other]})"
                )
    assert not upward, "imports that do not point down:\n" + "\n".join(sorted(upward))


def test_no_import_cycles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                cycles.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


FRONTEND_FORBIDDEN = ("radixrt", "torch", "transformers", "fastapi", "numpy", "llguidance")


def test_the_frontend_distribution_imports_no_runtime() -> None:
    """lang/radixrt_lang (the `radixrt-lang` distribution) imports, anywhere in a file, none of
    the runtime, torch or the server's libraries: it installs and runs alone."""
    found = []
    for path in (ROOT / "lang" / "radixrt_lang").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            top = {n.split(".")[0] for n in names}
            found += [f"{path.relative_to(ROOT)}: {t}" for t in top if t in FRONTEND_FORBIDDEN]
    assert not found, found
