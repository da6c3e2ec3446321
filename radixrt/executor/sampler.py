"""Sampler: next tokens (and logprobs) for a batch from its (B, V) last-position logits.

Per row: logit_bias and penalties (penalties.py), then greedy argmax, or temperature, top_k,
top_p (over the top-k mass when both are set), min_p and a draw (draws.py). Every draw is
inverse-CDF sampling with one uniform per row, so a seeded row consumes exactly one number from
`req.generator` per step and its tokens do not depend on the batch (on GPU, up to the float
order of scatter_add's sums). Ties at a cut: top_p and min_p keep every tied token; top_k keeps
k of them, unspecified which. A grammar's vocabulary mask (a bitmask per row) sets disallowed
logits to -inf before the penalties (so the min_new_tokens ban sees it), for the whole batch in
one step; logprobs still come from the raw logits. Non-finite logits are tamed first (NaN ->
-inf, +inf -> the largest float) and every row is shifted by its max before the temperature
divides it, so no row's probabilities overflow; a row with no finite logit left samples nothing
(id -1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.core import Req
from radixrt.executor.draws import MIN_TEMPERATURE, row_index, sample_rows, select_rows
from radixrt.executor.penalties import FLOAT32_MAX, apply_penalties

_INF = float("inf")
NO_TOKEN = -1  # next_token_ids entry of a row where no token is allowed


@dataclass(slots=True)
class SampleOutput:
    """One sampling step's result, row i for reqs[i]."""

    # In [0, vocab_size), or NO_TOKEN where the row had no finite logit left (every token
    # masked or banned, or the model's logits were all NaN): the caller ends that request.
    next_token_ids: list[int]
    # Logprob of the chosen token under the raw logits; NaN in rows without return_logprob.
    logprobs: list[float] | None
    # Top top_logprobs_num (logprob, token_id) under the raw logits, best first; [] if not asked.
    top_logprobs: list[list[tuple[float, int]]] | None


class Sampler:
    """Stateless except for the per-request generators it creates on `req.generator`."""

    def __init__(self, vocab_size: int, eos_token_ids: list[int]) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)

    def sample(
        self, logits: torch.Tensor, reqs: list[Req], vocab_mask: torch.Tensor | None = None
    ) -> SampleOutput:
        """Pick one token per row of `logits` (B, >= vocab_size); the tensor is not modified.

        `vocab_mask`: (B, ceil(vocab_size / 32)) int32 on any device, bit t of row i set when
        token t is allowed for reqs[i] (all bits set for a free row); None: no constraint."""
        assert logits.dim() == 2 and logits.shape[0] == len(reqs), logits.shape
        raw = logits[:, : self.vocab_size].float()  # (B, V) float32, a view when already float32
        work = raw
        if vocab_mask is not None:
            allowed = _unpack_bits(vocab_mask, self.vocab_size, raw.device)  # (B, V) bool
            work = raw.masked_fill(~allowed, -_INF)
        work = apply_penalties(work, reqs, self.eos_token_ids)
        if vocab_mask is not None and any(r.sampling_params.end_on_exit for r in reqs):
            _exit_mass_to_eos(raw, work, allowed, reqs, self.eos_token_ids)
        best = work.max(-1)  # (B,) max is faster than argmax on CPU; NaN and +inf propagate
        if not bool(torch.isfinite(best.values).all()):  # some row has NaN, +inf or no token
            work = torch.nan_to_num(work, nan=-_INF, posinf=FLOAT32_MAX, neginf=-_INF)
            best = work.max(-1)
        is_alive = best.values > -_INF  # (B,) bool: some token is allowed
        next_ids = best.indices  # (B,) int64: the greedy choice
        sampled = [i for i, r in enumerate(reqs) if not r.sampling_params.is_greedy]
        if sampled:
            idx = row_index(sampled, raw.device)
            is_all = len(sampled) == len(reqs)
            rows = work if is_all else work.index_select(0, idx)  # (S, V)
            row_max = best.values[:, None] if is_all else best.values.index_select(0, idx)[:, None]
            is_own = not is_all or work is not raw  # rows may be overwritten
            drawn = sample_rows(rows, row_max, [reqs[i] for i in sampled], is_own)
            next_ids = next_ids.index_put((idx,), drawn)
        # A draw must land on an allowed token; where rounding says otherwise, take the best.
        chosen = work.gather(1, next_ids.clamp(0, self.vocab_size - 1)[:, None])[:, 0]
        is_valid = (next_ids >= 0) & (next_ids < self.vocab_size) & (chosen > -_INF)
        next_ids = torch.where(is_valid, next_ids, best.indices)
        next_ids = torch.where(is_alive, next_ids, torch.full_like(next_ids, NO_TOKEN))
        logprobs, top_logprobs = _logprobs(raw, next_ids, reqs)
        return SampleOutput(next_ids.tolist(), logprobs, top_logprobs)


def _exit_mass_to_eos(
    raw: torch.Tensor,
    work: torch.Tensor,
    allowed: torch.Tensor,
    reqs: list[Req],
    eos_token_ids: list[int],
) -> None:
    """For end_on_exit rows whose grammar allows an EOS token (and no ban removed it): give
    that EOS the probability of every token the grammar disallows, at the row's temperature
    (1 for greedy rows), so ending is chosen exactly when the model would rather leave the
    grammar than continue it. Writes `work` (B, V) in place; `raw` (B, V) is read only."""
    rows = [i for i, r in enumerate(reqs) if r.sampling_params.end_on_exit]
    if not rows or not eos_token_ids:
        return
    device = raw.device
    idx = row_index(rows, device)
    temps = [
        1.0
        if reqs[i].sampling_params.is_greedy
        else max(reqs[i].sampling_params.temperature, MIN_TEMPERATURE)
        for i in rows
    ]
    t = torch.tensor(temps, device=device)[:, None]  # (R, 1)
    is_all = len(rows) == len(reqs)
    ok = allowed if is_all else allowed.index_select(0, idx)  # (R, V) bool
    eos = torch.tensor(eos_token_ids, dtype=torch.int64, device=device)  # (E,)
    # (R, E): an EOS the grammar allows that no ban has removed; the row ends with the first.
    can_end = ok[:, eos] & (work[:, eos].index_select(0, idx) > -_INF)
    has = can_end.any(dim=1)  # (R,)
    if not bool(has.any()):
        return
    first = eos[can_end.to(torch.int8).argmax(dim=1)]  # (R,) the EOS id of each row
    sub = raw if is_all else raw.index_select(0, idx)  # (R, V), never written
    leaving = sub.masked_fill(ok, -_INF).div_(t)  # (R, V) the refused tokens only
    mass = torch.logsumexp(leaving, dim=1)  # (R,) log of the refused mass at temperature t
    current = work[idx, first] / t[:, 0]
    merged = torch.logaddexp(current, mass) * t[:, 0]
    work[idx[has], first[has]] = merged[has]


def _unpack_bits(bitmask: torch.Tensor, width: int, device: torch.device) -> torch.Tensor:
    """(B, W) int32 bitmask -> (B, width) bool, bit j of word w is column 32 * w + j."""
    words = bitmask.to(device, non_blocking=True)
    shifts = torch.arange(32, dtype=torch.int32, device=device)
    bits = (words[:, :, None] >> shifts) & 1  # (B, W, 32) int32
    return bits.view(words.shape[0], -1)[:, :width].bool()


def _logprobs(
    raw: torch.Tensor, next_ids: torch.Tensor, reqs: list[Req]
) -> tuple[list[float] | None, list[list[tuple[float, int]]] | None]:
    """Chosen-token and top-k logprobs under the raw logits, for rows with return_logprob."""
    rows = [i for i, r in enumerate(reqs) if r.sampling_params.return_logprob]
    if not rows:
        return None, None
    idx = row_index(rows, raw.device)
    logp = torch.log_softmax(select_rows(raw, rows), dim=-1)  # (R, V)
    ids = next_ids[idx]
    chosen = logp.gather(1, ids.clamp(min=0)[:, None])[:, 0]
    chosen = torch.where(ids >= 0, chosen, float("nan")).tolist()  # NO_TOKEN rows: NaN
    logprobs = [float("nan")] * len(reqs)
    for i, lp in zip(rows, chosen, strict=True):
        logprobs[i] = lp
    nums = [min(reqs[i].sampling_params.top_logprobs_num, raw.shape[1]) for i in rows]
    if max(nums) == 0:
        return logprobs, None
    vals, ids = logp.topk(max(nums), dim=-1)
    vals_l, ids_l = vals.tolist(), ids.tolist()
    top: list[list[tuple[float, int]]] = [[] for _ in reqs]
    for j, (i, num) in enumerate(zip(rows, nums, strict=True)):
        top[i] = list(zip(vals_l[j][:num], ids_l[j][:num], strict=True))
    return logprobs, top
