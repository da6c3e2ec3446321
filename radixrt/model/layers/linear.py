"""Tensor-parallel layers: row-parallel linear, vocabulary-parallel embedding and LM head.

Column-parallel projections (q/k/v, gate/up) need no layer of their own: each rank's
nn.Linear holds its rows of the weight, sliced at load time. With one rank every factory
below returns the plain torch module, so tp=1 runs exactly the unsharded model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixrt.model.parallel.comm import BaseComm


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x_r W_r^T, then + bias once; one all-reduce per call.

    weight (out_features, in_features / tp): this rank's columns; bias (out_features,) whole.
    """

    def __init__(self, in_local: int, out_features: int, bias: bool, comm: BaseComm) -> None:
        super().__init__()
        self.comm = comm
        self.weight = nn.Parameter(torch.empty(out_features, in_local))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.comm.all_reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rows [vocab_start, vocab_start + shard) of the table; other ids give zeros, then the
    all-reduce fills every token's row from the rank that owns it. weight (shard, hidden)."""

    def __init__(self, vocab_start: int, shard: int, hidden: int, comm: BaseComm) -> None:
        super().__init__()
        self.comm = comm
        self.vocab_start = vocab_start
        self.weight = nn.Parameter(torch.empty(shard, hidden))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_start
        outside = (local < 0) | (local >= self.weight.shape[0])
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out.masked_fill_(outside.unsqueeze(-1), 0.0)
        return self.comm.all_reduce(out)


class GatheredLMHead(nn.Module):
    """This rank's vocabulary rows of the LM head; logits of all ranks are gathered, so every
    rank returns the whole (N, vocab_size). weight (shard, hidden)."""

    def __init__(self, vocab_size: int, shard: int, hidden: int, comm: BaseComm) -> None:
        super().__init__()
        self.comm = comm
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.empty(shard, hidden))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.comm.all_gather_last(F.linear(h, self.weight))
        return logits[..., : self.vocab_size]


def row_parallel_linear(in_local: int, out_features: int, bias: bool, comm: BaseComm) -> nn.Module:
    """nn.Linear for one rank, else a RowParallelLinear."""
    if comm.world_size == 1:
        return nn.Linear(in_local, out_features, bias=bias)
    return RowParallelLinear(in_local, out_features, bias, comm)


def vocab_embedding(
    vocab_size: int, vocab_start: int, shard: int, hidden: int, comm: BaseComm
) -> nn.Module:
    """nn.Embedding for one rank, else a VocabParallelEmbedding."""
    if comm.world_size == 1:
        # Given an (uninitialized) weight, it skips the random init the loaded weights replace
        # (under a device context that init imports torch._dynamo: 1.5 s of a start-up).
        return nn.Embedding(vocab_size, hidden, _weight=torch.empty(vocab_size, hidden))
    return VocabParallelEmbedding(vocab_start, shard, hidden, comm)


def lm_head(vocab_size: int, shard: int, hidden: int, comm: BaseComm) -> nn.Module:
    """nn.Linear (no bias) for one rank, else a GatheredLMHead."""
    if comm.world_size == 1:
        return nn.Linear(hidden, vocab_size, bias=False)
    return GatheredLMHead(vocab_size, shard, hidden, comm)
