"""Sampler: next tokens (and logprobs) for a batch from its (B, V) last-position logits.

Per row: penalties (penalties.py), then greedy argmax, or temperature, top_k, top_p (over the
top-k mass when both are set), min_p and a draw. Every draw is inverse-CDF sampling with one
uniform per row, so a seeded row consumes exactly one number from `req.generator` per step and
its tokens do not depend on the batch (on GPU, up to the float order of scatter_add's sums).
Ties at a cut: top_p and min_p keep every tied token; top_k keeps k of them, unspecified which.
A grammar's vocabulary mask (a bitmask per row) sets disallowed logits to -inf before the
penalties (so the min_new_tokens ban sees it), for the whole batch in one step; logprobs still
come from the raw logits. Non-finite logits are tamed first (NaN -> -inf, +inf -> the largest
float) and every row is shifted by its max before the temperature divides it, so no row's
probabilities overflow; a row with no finite logit left samples nothing (id -1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.core import Req, SamplingParams
from radixrt.executor.penalties import FLOAT32_MAX, apply_penalties

# Temperatures below this are clamped (only reached by rows that are not greedy).
_MIN_TEMPERATURE = 1e-5
# top_p without top_k: a histogram of log(p_max / p) in 1/32-nat buckets (the last bucket takes
# everything below e**-32 * p_max) finds the bucket where the nucleus ends; only that bucket
# is sorted, never the whole vocab.
_NUCLEUS_BUCKETS = 1024
_BUCKETS_PER_NAT = 32.0
_MIN_THRESHOLD = 1e-30
_BELOW_ONE = 1.0 - 2.0**-24  # the largest float32 below 1
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
            idx = _index(sampled, raw.device)
            is_all = len(sampled) == len(reqs)
            rows = work if is_all else work.index_select(0, idx)  # (S, V)
            row_max = best.values[:, None] if is_all else best.values.index_select(0, idx)[:, None]
            is_own = not is_all or work is not raw  # rows may be overwritten
            drawn = _sample_rows(rows, row_max, [reqs[i] for i in sampled], is_own)
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
    idx = _index(rows, device)
    temps = [
        1.0
        if reqs[i].sampling_params.is_greedy
        else max(reqs[i].sampling_params.temperature, _MIN_TEMPERATURE)
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


def _index(rows: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64, device=device)


def _select(t: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Rows of t (a view when rows is all of them)."""
    if len(rows) == t.shape[0]:
        return t
    return t.index_select(0, _index(rows, t.device))


def _sample_rows(
    logits: torch.Tensor, row_max: torch.Tensor, reqs: list[Req], is_own: bool
) -> torch.Tensor:
    """Sample (S,) int64 token ids from (S, V) finite-or--inf logits of non-greedy rows whose
    maxima are row_max (S, 1); a row whose max is -inf gives an arbitrary id (the caller
    replaces it). `is_own`: logits may be overwritten (shifted in place, still -inf where
    they were).

    Rows split into disjoint groups; each _sample_* helper may overwrite the probs it gets,
    which are a copy unless its group is every row.
    """
    device = logits.device
    params = [r.sampling_params for r in reqs]
    # Shifted so every row's max is 0: dividing by a small temperature cannot overflow, and
    # softmax sees at least one exp(0). A dead row (max -inf) becomes all NaN, harmlessly.
    scaled = logits.sub_(row_max) if is_own else logits - row_max  # (S, V) float32, <= 0
    if any(p.temperature != 1.0 for p in params):
        temps = [max(p.temperature, _MIN_TEMPERATURE) for p in params]
        scaled = scaled.div_(torch.tensor(temps, device=device)[:, None])
    probs = torch.softmax(scaled, dim=-1)  # (S, V) float32
    u = _uniforms(reqs, device)  # (S,) float32 in [0, 1)
    groups: tuple[list[int], list[int], list[int]] = ([], [], [])  # plain, top_k, nucleus
    for i, p in enumerate(params):
        if 0 < p.top_k < probs.shape[1]:
            groups[1].append(i)
        else:
            groups[0 if p.top_p == 1.0 and p.min_p == 0.0 else 2].append(i)
    plain, top_k, nucleus = groups
    out = torch.empty(len(reqs), dtype=torch.int64, device=device)
    if top_k:
        out[_index(top_k, device)] = _sample_top_k(
            _select(probs, top_k), [params[i] for i in top_k], _select(u, top_k)
        )
    if nucleus:
        out[_index(nucleus, device)] = _sample_nucleus(
            _select(scaled, nucleus),
            _select(probs, nucleus),
            [params[i] for i in nucleus],
            _select(u, nucleus),
        )
    if plain:
        out[_index(plain, device)] = _sample_vocab_order(_select(probs, plain), _select(u, plain))
    return out


def _sample_top_k(
    probs: torch.Tensor, params: list[SamplingParams], u: torch.Tensor
) -> torch.Tensor:
    """(R,) draws from the top_k tokens, then top_p over their renormalized mass, then min_p."""
    device = probs.device
    k = torch.tensor([p.top_k for p in params], device=device)
    top_p = torch.tensor([p.top_p for p in params], device=device)
    min_p = torch.tensor([p.min_p for p in params], device=device)
    vals, ids = probs.topk(max(p.top_k for p in params), dim=-1)  # (R, K) sorted desc
    vals = vals * (torch.arange(vals.shape[1], device=device) < k[:, None])
    cum = vals.cumsum(dim=-1)  # (R, K); cum[:, -1] is the top-k mass
    # Nucleus: tokens whose preceding mass is < top_p; min_p: prob >= min_p * max prob.
    is_kept = (cum - vals < (top_p * cum[:, -1])[:, None]) | (top_p[:, None] == 1.0)
    is_kept &= vals >= (min_p * vals[:, 0])[:, None]
    kept = vals * is_kept  # (R, K); positive entries form a prefix
    cdf = kept.cumsum(dim=-1)
    j = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
    j = torch.minimum(j, (kept > 0).sum(dim=-1, keepdim=True) - 1)  # u * total may round up
    return ids.gather(1, j)[:, 0]


def _sample_nucleus(
    scaled: torch.Tensor, probs: torch.Tensor, params: list[SamplingParams], u: torch.Tensor
) -> torch.Tensor:
    """(R,) draws from tokens that pass top_p and min_p (no top_k), in vocab order; eats probs."""
    device = probs.device
    threshold = torch.zeros(probs.shape[0], device=device)  # (R,) smallest prob kept
    if any(p.min_p > 0.0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], device=device)
        threshold = min_p * probs.amax(dim=-1)
    if p_rows := [j for j, p in enumerate(params) if p.top_p < 1.0]:
        top_p = torch.tensor([params[j].top_p for j in p_rows], device=device)
        cut = _nucleus_threshold(_select(scaled, p_rows), _select(probs, p_rows), top_p)
        p_idx = _index(p_rows, device)
        threshold[p_idx] = torch.maximum(threshold[p_idx], cut)
    return _sample_vocab_order(_drop_below(probs, threshold), u)


def _uniforms(reqs: list[Req], device: torch.device) -> torch.Tensor:
    """(S,) uniforms: seeded rows from req.generator (made on first use), others torch's RNG."""
    u = torch.rand(len(reqs), device=device)
    seeded = [i for i, r in enumerate(reqs) if r.sampling_params.seed is not None]
    if seeded:
        draws = []
        for i in seeded:
            req = reqs[i]
            if req.generator is None:
                req.generator = torch.Generator(device=device)
                req.generator.manual_seed(req.sampling_params.seed)
            draws.append(torch.rand(1, generator=req.generator, device=device))
        u[_index(seeded, device)] = torch.cat(draws)
    return u


def _drop_below(probs: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Turn (R, V) probs in place into weights: prob / threshold (R,) where >= 1, else 0."""
    # One cut at 1.0 for every row is a single vectorized F.threshold pass (a bool mask plus
    # torch.where is ~3x slower on CPU). Threshold-0 rows drop only probs below _MIN_THRESHOLD.
    probs.div_(threshold.clamp(min=_MIN_THRESHOLD)[:, None])
    return torch.nn.functional.threshold(probs, _BELOW_ONE, 0.0, inplace=True)


def _sample_vocab_order(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw over (R, V) unnormalized weights in vocab order; overwrites weights."""
    # In place: on CPU a fresh (R, V) buffer costs as much in page faults as the scan.
    cdf = weights.cumsum_(dim=-1)  # token j owns [cdf[j-1], cdf[j]), empty when its weight is 0
    total = cdf[:, -1:]  # (R, 1)
    # u * total may round up to total; the largest float below total still lands on a token.
    x = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True)[:, 0]


def _nucleus_threshold(
    scaled: torch.Tensor, probs: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Smallest prob in each row's nucleus (most likely tokens whose mass first reaches top_p).

    A nucleus that reaches the last bucket (p < e**-32 * p_max) gets threshold 0: keep all.
    """
    nb = _NUCLEUS_BUCKETS
    # (R, V) int64 bucket of log(p_max / p) = max(scaled) - scaled, in one pass before clamping.
    top = scaled.amax(dim=-1, keepdim=True) * _BUCKETS_PER_NAT
    bucket = torch.sub(top, scaled, alpha=_BUCKETS_PER_NAT).clamp_(max=nb - 1).long()
    mass = torch.zeros(probs.shape[0], nb, device=probs.device).scatter_add_(1, bucket, probs)
    cum = mass.cumsum(dim=-1)  # (R, nb)
    end = (cum < top_p[:, None]).sum(dim=-1, keepdim=True).clamp_(max=nb - 1)  # (R, 1)
    above = torch.nn.functional.pad(cum[:, :-1], (1, 0)).gather(1, end)  # mass before `end`
    end = torch.where(end == nb - 1, -1, end)  # no bucket -1: threshold 0
    vals = _sorted_values(probs, bucket == end)  # (R, K) the end bucket, desc, zero padded
    is_kept = (above + vals.cumsum(dim=-1) - vals < top_p[:, None]) & (vals > 0)
    num_kept = is_kept.sum(dim=-1, keepdim=True).clamp_(min=1)
    return vals.gather(1, num_kept - 1)[:, 0]


def _sorted_values(probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's probs where mask, sorted descending: (R, K) zero padded, K = max count."""
    row, col = mask.nonzero(as_tuple=True)  # (N,) each, row-major
    count = torch.bincount(row, minlength=probs.shape[0])  # (R,)
    pos = torch.arange(row.numel(), device=row.device) - (count.cumsum(0) - count)[row]
    vals = torch.zeros(probs.shape[0], max(int(count.max()), 1), device=probs.device)
    vals[row, pos] = probs[row, col]
    return vals.sort(dim=-1, descending=True).values


def _logprobs(
    raw: torch.Tensor, next_ids: torch.Tensor, reqs: list[Req]
) -> tuple[list[float] | None, list[list[tuple[float, int]]] | None]:
    """Chosen-token and top-k logprobs under the raw logits, for rows with return_logprob."""
    rows = [i for i, r in enumerate(reqs) if r.sampling_params.return_logprob]
    if not rows:
        return None, None
    idx = _index(rows, raw.device)
    logp = torch.log_softmax(_select(raw, rows), dim=-1)  # (R, V)
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
