"""A sparse mixture-of-experts MLP: a softmax router picks each token's top-k experts, and
each active expert runs once on all of its tokens (one pair of matmuls per expert, not per
token).

Parameters (this rank's share under tensor parallelism, each expert's intermediate rows):
`gate.weight` (E, hidden) the router, whole on every rank; `experts.gate_up_proj`
(E, 2 * I/tp, hidden) each expert's [gate; up] rows; `experts.down_proj` (E, hidden, I/tp).
With several ranks each returns its partial sum, all-reduced once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixrt.model.layers.activation import ACTIVATIONS
from radixrt.model.parallel.comm import BaseComm


class Experts(nn.Module):
    def __init__(self, num_experts: int, hidden: int, inter_local: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * inter_local, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, inter_local))


class SparseMoeBlock(nn.Module):
    """x (T, hidden) -> sum over each token's top-k experts of weight * expert(x) (T, hidden).

    Router weights: softmax over all experts in float32, the top k kept, renormalised to sum
    to 1 when `norm_topk_prob` (Mixtral always, Qwen3-MoE per its config)."""

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        top_k: int,
        inter_local: int,
        norm_topk_prob: bool,
        act: str,
        comm: BaseComm,
    ) -> None:
        super().__init__()
        self.top_k, self.norm_topk_prob = top_k, norm_topk_prob
        self.comm = comm
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = Experts(num_experts, hidden, inter_local)
        if act not in ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {act!r} (supported: {sorted(ACTIVATIONS)})")
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.gate(x).float(), dim=-1)  # (T, E) float32
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # (T, k) each
        if self.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        weights = weights.to(x.dtype).flatten()  # (T*k,) pair p = token p // k
        flat = chosen.flatten()
        order = torch.argsort(flat, stable=True)  # pairs grouped by expert
        counts = torch.bincount(flat, minlength=self.gate.out_features).tolist()
        out = torch.zeros_like(x)
        w13, w2 = self.experts.gate_up_proj, self.experts.down_proj
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            pairs = order[start : start + count]
            start += count
            tokens = pairs // self.top_k
            gate, up = F.linear(x.index_select(0, tokens), w13[expert]).chunk(2, dim=-1)
            y = F.linear(self.act(gate) * up, w2[expert]) * weights[pairs, None]
            out.index_add_(0, tokens, y)
        return self.comm.all_reduce(out) if self.comm.world_size > 1 else out
