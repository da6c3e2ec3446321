"""The soak's volume and metering kinds: a request over the logprob volume budget, refused
with a 400 that names it; and a cache explanation under another salt, which must tell
nothing of what the first salt cached. `VOLUME_KINDS`: name -> (weight, kind)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import httpx

from benchmarks.soak import cases as soak_cases
from benchmarks.soak.outcome import Kind, Outcome, SoakContext, error_message

VOLUME = 2**22  # logprob entries asked for: four times the default --max-logprob-entries


def bad_logprob_volume(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """n samples of quarter-context prompts, each with its prompt's top-100 logprobs: enough
    prompts for VOLUME entries, whatever the context length."""
    n, words = rng.choice((16, 64)), max(1, ctx.context_length // 4)
    prompts = 1 + VOLUME // (n * (words + 8) * 101)
    body = {"text": ["hello " * words] * prompts, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 8, "n": n},
            "logprob_start_len": 0, "top_logprobs_num": 100}  # fmt: skip
    r = c.post("/generate", json=body)
    message = error_message(r)
    refused = r.status_code == 400 and "--max-logprob-entries" in message
    return Outcome(r.status_code, refused, f"{prompts} prompts x n={n} x top 100", message)


def explain_other_salt(c: httpx.Client, rng: random.Random, ctx: SoakContext) -> Outcome:
    """Cache a prompt under one salt, explain it under another: anything but a cold answer
    (a count or text of the first salt's) is an anomaly."""
    words = " ".join(rng.choice(soak_cases.WORDS) for _ in range(60))
    text = f"private {uuid.uuid4().hex}: {words}"
    sp = {"max_new_tokens": 1, "temperature": 0}
    salt, other = uuid.uuid4().hex, uuid.uuid4().hex
    first = c.post("/generate", json={"text": text, "sampling_params": sp, "cache_salt": salt})
    if first.status_code != 200:
        return Outcome(first.status_code, False, "cache it", error_message(first))
    r = c.post("/v1/cache/explain", json={"text": text, "cache_salt": other})
    if r.status_code != 200:
        return Outcome(r.status_code, False, "explain", error_message(r))
    why: dict[str, Any] = r.json()
    if why.get("cached_tokens") or why.get("other_namespace_tokens") or "cached_side" in why:
        return Outcome(200, False, "leaked", f"another salt's explanation: {why}")
    return Outcome(200, True, str(why.get("cause")))


VOLUME_KINDS: dict[str, tuple[float, Kind]] = {
    "explain_other_salt": (1, explain_other_salt),
    "bad_logprob_volume": (0.5, bad_logprob_volume),
}
