"""The package's data files (model presets, GPU memory, provider prices), read as JSON."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

PRESET_DIR = "presets"


def read_data(name: str) -> Any:
    """Parse the bundled JSON file `name` (a path relative to radixrt/economics/)."""
    return json.loads(files("radixrt.economics").joinpath(name).read_text())


def preset_names() -> list[str]:
    """The bundled model presets, by file name without .json."""
    folder = files("radixrt.economics").joinpath(PRESET_DIR)
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )
