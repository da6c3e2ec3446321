"""Prompt text that renders the same way every time, so the prefix cache can keep it."""

from __future__ import annotations

import json
from typing import Any


def stable_json(value: Any) -> str:
    """`value` as JSON with sorted keys and fixed separators: the same data always gives the
    same text (a dict built in another order, a tool list from another source), so a prompt
    that embeds it keeps its cached prefix. Lists keep their order: sort them yourself where
    the order means nothing."""
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)
