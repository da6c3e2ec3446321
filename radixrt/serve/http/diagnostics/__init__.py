"""Cache-miss diagnostics: prompt fingerprints kept per answered request, and the rule that
compares a request with an earlier one (compare.py)."""

from radixrt.serve.http.diagnostics.compare import (
    Diagnosis,
    PromptRecord,
    compare_prompts,
    diagnose,
)
from radixrt.serve.http.diagnostics.fingerprint import Fingerprint, fingerprint
from radixrt.serve.http.diagnostics.store import FingerprintStore

__all__ = [
    "Diagnosis",
    "Fingerprint",
    "FingerprintStore",
    "PromptRecord",
    "compare_prompts",
    "diagnose",
    "fingerprint",
]
