"""The import graph: every import points down the floors of docs/architecture.md, and no module
imports itself through a cycle. Imports under `if TYPE_CHECKING:` count too: a type named from
a higher floor is an edge upward (Req's and ForwardBatch's slots are Protocols in core)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The rooms, bottom first: a room's modules import their own room and lower rooms only.
ROOMS: list[tuple[str, ...]] = [
    ("radixrt.core", "radixrt.lang"),  # nouns, config, messages, batches, text; the frontend
    ("radixrt.cache",),
    ("radixrt.model",),  # families, layers, attention, CPU and CUDA kernels, parallel comms
    ("radixrt.grammar",),
    ("radixrt.executor",),
    ("radixrt.scheduler", "radixrt.economics"),
    ("radixrt.serve",),  # HTTP server and dialects, Engine, router, placement, Ray, web
    ("radixrt.launch_server", "radixrt.bench"),
    ("radixrt.cli",),
    ("radixrt",),
]
ROOM = {room: i for i, rooms in enumerate(ROOMS) for room in rooms}

# Within and across rooms, the units, bottom first. A module may import its own unit and any
# lower floor; units on one floor may not import each other. A unit is the longest of these
# names that prefixes the module's.
FLOORS: list[tuple[str, ...]] = [
    ("radixrt.core.config", "radixrt.core", "radixrt.lang"),  # lang: nothing of the runtime
    (
        "radixrt.core.messages",
        "radixrt.core.text",
        "radixrt.core.forward_batch",
        "radixrt.model.cuda",
    ),  # fmt: skip
    ("radixrt.model.parallel", "radixrt.cache", "radixrt.serve.results"),
    ("radixrt.model.attention",),
    ("radixrt.model.layers",),
    ("radixrt.model.cpu",),  # the CPU fast path; the attention registry names its backend
    ("radixrt.model", "radixrt.model.families"),  # model: the room's own package
    ("radixrt.grammar",),
    ("radixrt.executor",),
    ("radixrt.scheduler", "radixrt.serve.placement", "radixrt.economics"),  # economics: arch
    ("radixrt.serve.engine", "radixrt.serve.web"),
    ("radixrt.serve.http",),
    ("radixrt.serve.router", "radixrt.serve.ray"),
    ("radixrt.serve", "radixrt.launch_server", "radixrt.bench"),  # bench: benchmarks/' door
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


def _longest(module: str, names: dict[str, int], what: str) -> str:
    """The longest of `names` that is `module` or a package above it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in names:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} is in no {what}: add it to {what.upper()}S")


def _unit(module: str) -> str:
    return _longest(module, FLOOR, "floor")


def _room(module: str) -> str:
    return _longest(module, ROOM, "room")


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of the project that `name` imports anywhere in the file, at run time or under
    `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
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
    return {name: _imports(name, path, modules) for name, path in modules.items()}


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


def test_rooms_import_their_own_and_lower_rooms() -> None:
    upward = []
    for name, targets in _graph().items():
        room = _room(name)
        for target in targets:
            other = _room(target)
            if other != room and ROOM[other] >= ROOM[room]:
                upward.append(f"{name} -> {target} ({room} above {other}?)")
    assert not upward, "imports into a higher room:\n" + "\n".join(sorted(upward))


def test_the_runtime_imports_no_benchmark() -> None:
    """benchmarks/ (and its fixtures) live outside the wheel: nothing in radixrt imports them,
    but for `radixrt.bench`, the door that runs them from a checkout."""
    found = []
    for name, path in _modules().items():
        if name == "radixrt.bench":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{name}: {n}" for n in names if n.split(".")[0] == "benchmarks"]
    assert not found, found


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


def test_the_core_nouns_import_no_torch() -> None:
    """radixrt.core is plain Python but for the forward batch: no module of it names torch,
    not even for annotations (Req's generator slot is a Protocol, core/req_slots.py)."""
    found = []
    for name, path in _modules().items():
        if not name.startswith("radixrt.core") or name == "radixrt.core.forward_batch":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{name}: {n}" for n in names if n.split(".")[0] == "torch"]
    assert not found, found


def test_serve_parts_have_one_name() -> None:
    """No module in radixrt/serve is named like one of serve's parts (`serve/router/` beside a
    `ray/router.py`), and the placement's request keys are not a second `keys.py` beside the
    API keys of `serve/web/keys.py`."""
    serve = ROOT / "radixrt" / "serve"
    parts = {p.name for p in serve.iterdir() if (p / "__init__.py").exists()}
    stems = [p for p in serve.rglob("*.py") if p.stem in parts and p.parent.name != p.stem]
    names = [p.relative_to(serve).as_posix() for p in serve.rglob("keys.py")]
    assert not stems, [str(p.relative_to(ROOT)) for p in stems]
    assert names == ["web/keys.py"], names
