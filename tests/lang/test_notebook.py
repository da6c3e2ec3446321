"""CI runs the notebooks of examples/notebooks (each starts its own server); any failing cell
fails, and each notebook's outputs show what it is about."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "examples" / "notebooks"


@pytest.fixture(autouse=True)
def _this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel and the server it starts import radixrt from this checkout, whatever the
    environment has installed."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def _execute(name: str, tmp_path: Path) -> Any:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # the kernel shuts down after it, and LocalServer stops at exit
    nbformat.write(nb, tmp_path / name)
    return nb


def _outputs(nb: Any, kind: str) -> list[str]:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if kind == "stream" and o.get("output_type") == "stream":
                out.append(o["text"])
            elif kind in o.get("data", {}):
                out.append(o["data"][kind])
    return out


def test_agent_notebook_runs(tmp_path: Path) -> None:
    nb = _execute("agent.ipynb", tmp_path)
    html = _outputs(nb, "text/html")
    assert html and 'class="rt-gen"' in html[0] and 'class="rt-select"' in html[0]
    assert "rt-calls" in html[0]


def test_tool_agent_notebook_runs(tmp_path: Path) -> None:
    """The OpenAI SDK and the language drive the tools; every turn prints its cache figures."""
    nb = _execute("tool_agent.ipynb", tmp_path)
    text = "".join(_outputs(nb, "stream"))
    assert "calculator(" in text or "search_docs(" in text  # the SDK loop ran a tool
    assert "sdk q2 step 1" in text and "  call0 " in text and "saved ~" in text
    assert "prompt tokens cached" in text
    assert "rt-calls" in _outputs(nb, "text/html")[-1]
