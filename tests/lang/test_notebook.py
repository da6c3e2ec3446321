"""CI runs examples/notebooks/agent.ipynb (it starts its own server); any failing cell fails."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebooks" / "agent.ipynb"


def test_agent_notebook_runs(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # the kernel shuts down after it, and LocalServer stops at exit
    nbformat.write(nb, tmp_path / "agent.out.ipynb")
    html = [
        o["data"]["text/html"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "text/html" in o.get("data", {})
    ]
    assert html and 'class="rt-gen"' in html[0] and 'class="rt-select"' in html[0]
    assert "rt-calls" in html[0]
