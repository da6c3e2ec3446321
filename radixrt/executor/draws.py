"""Drawing one token per non-greedy row: temperature, then top_k / top_p / min_p cuts, then an
inverse-CDF draw with one uniform per row (a seeded row's from `req.generator`, made on first
use). The Sampler (sampler.py) decides which rows come here and checks what they draw."""

from __future__ import annotations

import torch

from radixrt.core import Req, SamplingParams

# Temperatures below this are clamped (only reached by rows that are not greedy).
MIN_TEMPERATURE = 1e-5
# top_p without top_k: a histogram of log(p_max / p) in 1/32-nat buckets (the last bucket takes
# everything below e**-32 * p_max) finds the bucket where the nucleus ends; only that bucket
# is sorted, never the whole vocab.
_NUCLEUS_BUCKETS = 1024
_BUCKETS_PER_NAT = 32.0
_MIN_THRESHOLD = 1e-30
_BELOW_ONE = 1.0 - 2.0**-24  # the largest float32 below 1


def sample_rows(
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
        temps = [max(p.temperature, MIN_TEMPERATURE) for p in params]
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
        out[row_index(top_k, device)] = _sample_top_k(
            select_rows(probs, top_k), [params[i] for i in top_k], select_rows(u, top_k)
        )
    if nucleus:
        out[row_index(nucleus, device)] = _sample_nucleus(
            select_rows(scaled, nucleus),
            select_rows(probs, nucleus),
            [params[i] for i in nucleus],
            select_rows(u, nucleus),
        )
    if plain:
        out[row_index(plain, device)] = _sample_vocab_order(
            select_rows(probs, plain), select_rows(u, plain)
        )
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
        cut = _nucleus_threshold(select_rows(scaled, p_rows), select_rows(probs, p_rows), top_p)
        p_idx = row_index(p_rows, device)
        threshold[p_idx] = torch.maximum(threshold[p_idx], cut)
    return _sample_vocab_order(_drop_below(probs, threshold), u)


def _uniforms(reqs: list[Req], device: torch.device) -> torch.Tensor:
    """(S,) uniforms: seeded rows from req.generator (made on first use), others torch's RNG."""
    u = torch.rand(len(reqs), device=device)
    seeded = [i for i, r in enumerate(reqs) if r.sampling_params.seed is not None]
    if seeded:
        draws = [
            torch.rand(1, generator=request_generator(reqs[i], device), device=device)
            for i in seeded
        ]
        u[row_index(seeded, device)] = torch.cat(draws)
    return u


def request_generator(req: Req, device: torch.device) -> torch.Generator:
    """A seeded request's generator, made from its seed on first use (one uniform per token)."""
    gen = req.generator
    if gen is None:
        made = torch.Generator(device=device)
        made.manual_seed(req.sampling_params.seed)
        req.generator = made
        return made
    assert isinstance(gen, torch.Generator)  # the slot is only ever set here
    return gen


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


def row_index(rows: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64, device=device)


def select_rows(t: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Rows of t (a view when rows is all of them)."""
    if len(rows) == t.shape[0]:
        return t
    return t.index_select(0, row_index(rows, t.device))
