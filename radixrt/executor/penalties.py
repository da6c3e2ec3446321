"""Logit adjustments applied before sampling: allowed_token_ids (every other token -inf),
logit_bias, then the repetition, frequency and presence penalties, then the min_new_tokens
ban on stop tokens.

Work is proportional to the tokens penalized, not to B x V: token lists become flat indices
`row * V + token_id` into the (B, V) logits, and each penalty is one gather/scatter.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable

import numpy as np
import torch

from radixrt.core import Req

FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def apply_penalties(
    logits: torch.Tensor, reqs: list[Req], eos_token_ids: list[int]
) -> torch.Tensor:
    """Bias and penalize (B, V) logits and ban stop tokens before min_new_tokens; never
    writes `logits`.

    Returns a new tensor when any row is affected, else `logits` itself.
    """
    allow_rows = [i for i, r in enumerate(reqs) if r.sampling_params.allowed_token_ids]
    bias_rows = [i for i, r in enumerate(reqs) if r.sampling_params.logit_bias]
    rep_rows = [i for i, r in enumerate(reqs) if r.sampling_params.repetition_penalty != 1.0]
    freq_rows = [i for i, r in enumerate(reqs) if r.output_ids and _has_output_penalty(r)]
    ban_rows = [
        i for i, r in enumerate(reqs) if len(r.output_ids) < r.sampling_params.min_new_tokens
    ]
    if not (allow_rows or bias_rows or rep_rows or freq_rows or ban_rows):
        return logits
    out = logits.clone(memory_format=torch.contiguous_format)  # (B, V) float32
    if allow_rows:
        _keep_allowed(out, [reqs[i] for i in allow_rows], allow_rows)
    if bias_rows:
        _apply_bias(out, [reqs[i] for i in bias_rows], bias_rows)
    if rep_rows:
        _apply_repetition(out, [reqs[i] for i in rep_rows], rep_rows)
    if freq_rows:
        _apply_frequency_presence(out, [reqs[i] for i in freq_rows], freq_rows)
    if ban_rows:
        _ban_stop_tokens(out, [reqs[i] for i in ban_rows], ban_rows, eos_token_ids)
    return out


def _has_output_penalty(req: Req) -> bool:
    params = req.sampling_params
    return params.frequency_penalty != 0.0 or params.presence_penalty != 0.0


def _flat_keys(
    logits: torch.Tensor, rows: list[int], seqs: list[Iterable[int]], lens: list[int]
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Flat indices row * V + token for every token of seqs[j] (row rows[j]) inside the
    vocabulary, their j, and which of the tokens (in order) those are (a bool mask)."""
    vocab = logits.shape[1]
    tokens = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=sum(lens))
    owner = np.repeat(np.arange(len(rows)), lens)  # (N,) index into rows
    valid = (tokens >= 0) & (tokens < vocab)
    tokens, owner = tokens[valid], owner[valid]
    keys = np.asarray(rows, dtype=np.int64)[owner] * vocab + tokens
    return torch.from_numpy(keys).to(logits.device), owner, valid


def _write_finite(
    flat: torch.Tensor, keys: torch.Tensor, old: torch.Tensor, new: torch.Tensor
) -> None:
    """flat[keys] = new, except where old was infinite (a -inf masked by a grammar stays
    -inf); a finite value stays finite."""
    flat[keys] = torch.where(old.isinf(), old, new.clamp(-FLOAT32_MAX, FLOAT32_MAX))


def _per_token(logits: torch.Tensor, values: list[float], owner: np.ndarray) -> torch.Tensor:
    """Broadcast one value per row to its tokens: (N,) float32 on the logits' device."""
    return torch.from_numpy(np.asarray(values, dtype=np.float32)[owner]).to(logits.device)


def _keep_allowed(logits: torch.Tensor, reqs: list[Req], rows: list[int]) -> None:
    """vLLM's allowed_token_ids: each row's logits -inf but at its listed ids. Work per step:
    the rows' V (each list's mask is built once: `_allowed_mask`)."""
    vocab, device = logits.shape[1], logits.device
    masks = torch.stack([_allowed_mask(r.sampling_params.allowed_token_ids, vocab, device)
                         for r in reqs])  # fmt: skip  # (R, V) bool
    index = torch.tensor(rows, device=device)
    logits[index] = logits[index].masked_fill(~masks, float("-inf"))


# allowed_token_ids lists -> their (V,) masks, least recently used first. Keyed by the list
# object, which the n samples and a draft's verifying rows of one request share (the entry
# holds the list, so its id is not reused while cached).
_MASKS: OrderedDict[tuple[int, int, str], tuple[list[int], torch.Tensor]] = OrderedDict()
_MASKS_KEPT = 64


def _allowed_mask(ids: list[int], vocab: int, device: torch.device) -> torch.Tensor:
    """(V,) bool: True at `ids` inside the vocabulary (ids past it are refused at admission)."""
    key = (id(ids), vocab, str(device))
    hit = _MASKS.get(key)
    if hit is not None and hit[0] is ids:
        _MASKS.move_to_end(key)
        return hit[1]
    mask = torch.zeros(vocab, dtype=torch.bool)
    known = torch.tensor(ids, dtype=torch.int64)
    mask[known[known < vocab]] = True
    mask = mask.to(device)
    _MASKS[key] = (ids, mask)
    while len(_MASKS) > _MASKS_KEPT:
        _MASKS.popitem(last=False)
    return mask


def _apply_bias(logits: torch.Tensor, reqs: list[Req], rows: list[int]) -> None:
    """OpenAI's logit_bias: logit += bias[token] for each listed token (ids past the
    vocabulary are refused at admission and skipped here; keys are distinct, so each is added
    once)."""
    biases = [r.sampling_params.logit_bias for r in reqs]
    lens = [len(b) for b in biases]
    keys, _, valid = _flat_keys(logits, rows, biases, lens)
    values = np.fromiter(
        itertools.chain.from_iterable(b.values() for b in biases), dtype=np.float32, count=sum(lens)
    )
    flat = logits.view(-1)
    old = flat[keys]
    _write_finite(flat, keys, old, old + torch.from_numpy(values[valid]).to(logits.device))


def _apply_repetition(logits: torch.Tensor, reqs: list[Req], rows: list[int]) -> None:
    """CTRL-style over prompt + output: positive logits / p, negative logits * p (once a token)."""
    seqs = [itertools.chain(r.input_ids, r.output_ids) for r in reqs]
    keys, owner, _ = _flat_keys(logits, rows, seqs, [r.seq_len for r in reqs])
    penalty = _per_token(logits, [r.sampling_params.repetition_penalty for r in reqs], owner)
    flat = logits.view(-1)
    # Duplicate keys read the same old value and write the same new one, so each token
    # is penalized once however often it occurs.
    old = flat[keys]
    _write_finite(flat, keys, old, torch.where(old > 0, old / penalty, old * penalty))


def _apply_frequency_presence(logits: torch.Tensor, reqs: list[Req], rows: list[int]) -> None:
    """OpenAI-style over output tokens: logit -= frequency * count + presence * (count > 0)."""
    keys, owner, _ = _flat_keys(
        logits, rows, [r.output_ids for r in reqs], [len(r.output_ids) for r in reqs]
    )
    flat = logits.view(-1)
    presence = [r.sampling_params.presence_penalty for r in reqs]
    if any(presence):
        flat[keys] = flat[keys] - _per_token(logits, presence, owner)  # once per distinct key
    frequency = [r.sampling_params.frequency_penalty for r in reqs]
    if any(frequency):
        flat.index_add_(0, keys, -_per_token(logits, frequency, owner))  # once per occurrence


def _ban_stop_tokens(
    logits: torch.Tensor, reqs: list[Req], rows: list[int], eos_token_ids: list[int]
) -> None:
    """Set EOS and stop_token_ids to -inf, except in a row where that would leave no token."""
    banned = [
        sorted(
            set(r.sampling_params.stop_token_ids)
            | (set() if r.sampling_params.ignore_eos else set(eos_token_ids))
        )
        for r in reqs
    ]
    keys, owner, _ = _flat_keys(logits, rows, banned, [len(b) for b in banned])
    if keys.numel() == 0:
        return
    flat = logits.view(-1)
    old = flat[keys]
    flat[keys] = float("-inf")
    row_idx = torch.tensor(rows, device=logits.device)
    is_dead = logits.index_select(0, row_idx).amax(-1) == float("-inf")  # (R,) bool
    if bool(is_dead.any()):
        restore = is_dead[torch.from_numpy(owner).to(logits.device)]
        flat[keys[restore]] = old[restore]
