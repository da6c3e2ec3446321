"""Whether a prompt can ever run with its sampling parameters on one model and KV pool: the
one set of fit rules. The HTTP server applies them before a request is sent (a 400 naming the
rule) and the scheduler when it queues one (an abort, which is what the Engine's caller sees)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from radixrt.core.sampling import SamplingParams


@dataclass(frozen=True, slots=True)
class FitLimits:
    """What every request must fit, as measured where the model and pool live."""

    context_len: int
    capacity: int  # KV slots of the pool (max_total_tokens)
    vocab_size: int

    @property
    def room(self) -> int:
        """The most tokens (prompt plus output) one request can hold: a request must fit the
        pool on its own too, or it could never be scheduled again after a retraction."""
        return min(self.context_len, self.capacity)


def check_fit(ids: Sequence[int], sp: SamplingParams, limits: FitLimits) -> str | None:
    """Why prompt `ids` with `sp` can never run within `limits` (a message for the client), or
    None when it can. A max_new_tokens past the context only ends the output early."""
    n = len(ids)
    if n == 0:
        return "the prompt is empty"
    vocab = limits.vocab_size
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        return f"input_ids: token id {bad} is outside the vocabulary [0, {vocab})"
    if (why := sp.check_against(n, vocab)) is not None:
        return why
    if n >= limits.context_len:
        return f"the prompt has {n} tokens; the context length is {limits.context_len}"
    if len(sp.prediction_ids) > limits.context_len:  # its index is built per request
        return (f"the prediction has {len(sp.prediction_ids)} tokens; the context length is "
                f"{limits.context_len}")  # fmt: skip
    if n + 1 > limits.capacity:  # capacity is whole pages: no rounding needed
        return f"the prompt has {n} tokens but the KV pool holds only {limits.capacity}"
    return None
