"""Sampler: next tokens (and logprobs) for a batch from its (B, V) last-position logits.

Per row: penalties (penalties.py), then greedy argmax, or temperature, top_k, top_p, min_p and
a draw. Every draw is inverse-CDF sampling with one uniform per row, so a seeded row consumes
exactly one number from `req.generator` per step and its tokens do not depend on the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.core import Req
from radixrt.executor.penalties import apply_penalties

# Temperatures below this are clamped (only reached by rows that are not greedy).
_MIN_TEMPERATURE = 1e-5
# top_p rows without top_k look for the nucleus among tokens with prob >= ratio * max prob,
# trying each ratio until the candidates hold top_p of the mass; 0.0 means the whole vocab.
_NUCLEUS_RATIOS = (2.0**-8, 2.0**-16, 0.0)


@dataclass(slots=True)
class SampleOutput:
    """One sampling step's result, row i for reqs[i]."""

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

    def sample(self, logits: torch.Tensor, reqs: list[Req]) -> SampleOutput:
        """Pick one token per row of `logits` (B, >= vocab_size); the tensor is not modified."""
        assert logits.dim() == 2 and logits.shape[0] == len(reqs), logits.shape
        raw = logits[:, : self.vocab_size].float()  # (B, V) float32, a view when already float32
        work = apply_penalties(raw, reqs, self.eos_token_ids)
        sampled = [i for i, r in enumerate(reqs) if not r.sampling_params.is_greedy]
        if not sampled:
            next_ids = work.max(-1).indices  # (B,) int64; max is faster than argmax on CPU
        else:
            next_ids = torch.empty(len(reqs), dtype=torch.int64, device=raw.device)
            greedy = [i for i, r in enumerate(reqs) if r.sampling_params.is_greedy]
            if greedy:
                idx = _index(greedy, raw.device)
                next_ids[idx] = work.index_select(0, idx).max(-1).indices
            idx = _index(sampled, raw.device)
            rows = work if len(sampled) == len(reqs) else work.index_select(0, idx)
            next_ids[idx] = _sample_rows(rows, [reqs[i] for i in sampled])
        logprobs, top_logprobs = _logprobs(raw, next_ids, reqs)
        return SampleOutput(next_ids.tolist(), logprobs, top_logprobs)


def _index(rows: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64, device=device)


def _select(t: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Rows of t (a view when rows is all of them)."""
    if len(rows) == t.shape[0]:
        return t
    return t.index_select(0, _index(rows, t.device))


def _sample_rows(logits: torch.Tensor, reqs: list[Req]) -> torch.Tensor:
    """Sample (S,) int64 token ids from (S, V) penalized logits of non-greedy rows."""
    device = logits.device
    params = [r.sampling_params for r in reqs]
    temps = torch.tensor([max(p.temperature, _MIN_TEMPERATURE) for p in params], device=device)
    probs = torch.softmax(logits / temps[:, None], dim=-1)  # (S, V) float32
    u = _uniforms(reqs, device)  # (S,) float32 in [0, 1)
    vocab = probs.shape[1]
    top_k = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]  # 0: off
    out = torch.empty(len(reqs), dtype=torch.int64, device=device)
    groups: dict[str, list[int]] = {"plain": [], "top_k": [], "nucleus": []}
    for i, p in enumerate(params):
        if top_k[i]:
            groups["top_k"].append(i)
        elif p.top_p < 1.0 or p.min_p > 0.0:
            groups["nucleus"].append(i)
        else:
            groups["plain"].append(i)
    if rows := groups["plain"]:
        out[_index(rows, device)] = _sample_vocab_order(_select(probs, rows), _select(u, rows))
    top_p = torch.tensor([p.top_p if p.top_p < 1.0 else 2.0 for p in params], device=device)
    min_p = torch.tensor([p.min_p for p in params], device=device)
    if rows := groups["top_k"]:
        idx = _index(rows, device)
        k = torch.tensor([top_k[i] for i in rows], device=device)
        vals, ids = _select(probs, rows).topk(int(k.max()), dim=-1)  # (R, K) sorted desc
        vals = vals * (torch.arange(vals.shape[1], device=device) < k[:, None])
        mass = vals.cumsum(dim=-1)[:, -1]  # top_p renormalizes over the top-k set
        out[idx] = _sample_sorted(vals, ids, top_p[idx], min_p[idx], u[idx], mass)
    if rows := groups["nucleus"]:
        idx = _index(rows, device)
        out[idx] = _sample_nucleus(_select(probs, rows), top_p[idx], min_p[idx], u[idx])
    return out


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


def _sample_vocab_order(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw over the whole (R, V) distribution in vocab order: (R,) int64."""
    cdf = probs.cumsum(dim=-1)  # (R, V); token j owns [cdf[j-1], cdf[j]), empty when p_j == 0
    ids = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    ids = ids.clamp_(max=probs.shape[1] - 1)
    # u * total can round up to total; such rows fall back to their most likely token.
    is_bad = probs.gather(1, ids[:, None])[:, 0] == 0
    if bool(is_bad.any()):
        ids = torch.where(is_bad, probs.argmax(dim=-1), ids)
    return ids


def _sample_nucleus(
    probs: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """Sample (R,) rows that use top_p and/or min_p but not top_k, mostly without a full sort."""
    out = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    p_max = probs.amax(dim=-1)  # (R,)
    pending = torch.arange(probs.shape[0], device=probs.device)
    for level in _NUCLEUS_RATIOS:
        sub = probs if pending.numel() == probs.shape[0] else probs[pending]
        if level == 0.0:
            vals, ids = sub.sort(dim=-1, descending=True, stable=True)
            is_done = torch.ones(pending.numel(), dtype=torch.bool, device=probs.device)
        else:
            # Every kept token has prob >= min_p * p_max, so ratio <= min_p always suffices;
            # min_p-only rows (top_p == 2.0) start there.
            is_top_p = top_p[pending] <= 1.0
            ratio = torch.where(is_top_p, min_p[pending].clamp(min=level), min_p[pending])
            vals, ids = _candidates(sub, ratio * p_max[pending])
            # cumsum, not sum: trailing zero padding then cannot change the result.
            is_done = (ratio <= min_p[pending]) | (vals.cumsum(dim=-1)[:, -1] >= top_p[pending])
        done = pending[is_done]
        if done.numel() > 0:
            mass = torch.ones(done.numel(), device=probs.device)
            out[done] = _sample_sorted(
                vals[is_done], ids[is_done], top_p[done], min_p[done], u[done], mass
            )
        pending = pending[~is_done]
        if pending.numel() == 0:
            break
    return out


def _candidates(probs: torch.Tensor, threshold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens with prob >= threshold per row, sorted desc: vals/ids (P, K), zero padded."""
    is_cand = probs >= threshold[:, None]  # (P, V) bool; each row's max qualifies
    count = is_cand.sum(dim=-1)  # (P,)
    row, col = is_cand.nonzero(as_tuple=True)  # row-major, col ascending
    pos = torch.arange(row.numel(), device=row.device) - (count.cumsum(0) - count)[row]
    vals = torch.zeros(probs.shape[0], int(count.max()), device=probs.device)
    ids = torch.zeros_like(vals, dtype=torch.int64)
    vals[row, pos], ids[row, pos] = probs[row, col], col
    # Stable: equal probs keep token-id order, so the draw does not depend on the batch.
    vals, order = vals.sort(dim=-1, descending=True, stable=True)
    return vals, ids.gather(1, order)


def _sample_sorted(
    vals: torch.Tensor,
    ids: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    u: torch.Tensor,
    mass: torch.Tensor,
) -> torch.Tensor:
    """Filter and draw from candidates sorted by prob: vals/ids (R, K), padding has prob 0.

    top_p is relative to `mass` (R,): the top-k mass when top_k renormalized first, else 1.
    """
    cum = vals.cumsum(dim=-1)  # (R, K)
    # Nucleus: tokens whose preceding mass is < top_p; min_p: prob >= min_p * max prob.
    is_kept = ((cum - vals) < (top_p * mass)[:, None]) & (vals >= (min_p * vals[:, 0])[:, None])
    kept = vals * is_kept  # positive entries form a prefix
    cdf = kept.cumsum(dim=-1)
    j = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
    j = torch.minimum(j, (kept > 0).sum(dim=-1, keepdim=True) - 1)
    return ids.gather(1, j)[:, 0]


def _logprobs(
    raw: torch.Tensor, next_ids: torch.Tensor, reqs: list[Req]
) -> tuple[list[float] | None, list[list[tuple[float, int]]] | None]:
    """Chosen-token and top-k logprobs under the raw logits, for rows with return_logprob."""
    rows = [i for i, r in enumerate(reqs) if r.sampling_params.return_logprob]
    if not rows:
        return None, None
    idx = _index(rows, raw.device)
    logp = torch.log_softmax(_select(raw, rows), dim=-1)  # (R, V)
    chosen = logp.gather(1, next_ids[idx][:, None])[:, 0].tolist()
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
