"""Shared nouns of the runtime: sampling parameters, requests, finish reasons and batches.

Everything here is plain Python (no torch) so the server and the language can use it. Each
noun lives in its own module; callers import them from `radixrt.core`.
"""

from __future__ import annotations

from radixrt.core.finish_reason import FinishKind, FinishReason
from radixrt.core.fit import FitLimits, check_fit
from radixrt.core.pin_spec import PinOutcome, PinSpec
from radixrt.core.req import Batch, Req
from radixrt.core.sampling import (
    INT64_MAX,
    INT64_MIN,
    REPETITION_PENALTY_RANGE,
    SAMPLING_ALIASES,
    TEMPERATURE_RANGE,
    SamplingParams,
)

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "REPETITION_PENALTY_RANGE",
    "TEMPERATURE_RANGE",
    "SAMPLING_ALIASES",
    "Batch",
    "FitLimits",
    "FinishKind",
    "FinishReason",
    "PinOutcome",
    "PinSpec",
    "Req",
    "SamplingParams",
    "check_fit",
]
