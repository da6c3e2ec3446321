"""Every kind the soak mixes, by name: (weight, kind) from cases.py (well-formed requests),
malformed.py (the `bad_*` ones), hostile.py (raw request lines a browser or a traversal would
send) and volume.py (logprob volume, explanations across salts)."""

from __future__ import annotations

from benchmarks.soak.cases import KINDS as CASE_KINDS
from benchmarks.soak.hostile import hostile_kinds
from benchmarks.soak.malformed import MALFORMED_KINDS
from benchmarks.soak.outcome import Kind
from benchmarks.soak.volume import VOLUME_KINDS

KINDS: dict[str, tuple[float, Kind]] = {
    **CASE_KINDS,
    **MALFORMED_KINDS,
    **hostile_kinds(),
    **VOLUME_KINDS,
}
