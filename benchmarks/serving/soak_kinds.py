"""Every kind the soak mixes, by name: (weight, kind) from soak_cases (malformed and normal
requests), soak_hostile (raw request lines a browser or a traversal would send) and
soak_volume (logprob volume, explanations across salts)."""

from __future__ import annotations

from benchmarks.serving.soak_cases import KINDS as CASE_KINDS
from benchmarks.serving.soak_cases import Kind
from benchmarks.serving.soak_hostile import hostile_kinds
from benchmarks.serving.soak_volume import VOLUME_KINDS

KINDS: dict[str, tuple[float, Kind]] = {**CASE_KINDS, **hostile_kinds(), **VOLUME_KINDS}
