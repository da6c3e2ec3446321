"""Model architectures, chosen by the `architectures` field of config.json (families.py)."""

from __future__ import annotations

import importlib

from radixrt.model.families.families import FAMILIES


def get_model_cls(architecture: str) -> type:
    """Return the model class for an HF architecture name; ValueError lists the supported ones."""
    if architecture not in FAMILIES:
        raise ValueError(
            f"unsupported model architecture {architecture!r}; supported: {sorted(FAMILIES)}"
        )
    module_name, cls_name = FAMILIES[architecture].model.split(":")
    return getattr(importlib.import_module(module_name), cls_name)
