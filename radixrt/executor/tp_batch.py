"""The batch description rank 0 broadcasts to the other tensor-parallel ranks before a forward.

Two broadcasts of plain int64 tensors per forward (no pickle): a fixed header, then one payload.

    header  (6,)  [kind, B, T, N, R, 0]   kind: 1 forward, 0 stop
    payload (2T + 4B + N + R,) = input_ids (T) | out_loc (T) | req_pool_indices (B)
            | prefix_lens (B) | extend_lens (B) | prompt_tokens (B) | logits_indices (N)
            | req_to_token rows (R = sum of seq_lens): row i's slots [0, prefix + extend)

Every rank writes the rows into its own req_to_token, so all ranks attend over the same slots
of identically laid out KV pools (rank 0 alone allocates them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.cache.memory_pool import ReqToTokenPool
from radixrt.model.parallel.comm import BaseComm

_HEADER_LEN = 6
_FORWARD, _STOP = 1, 0


@dataclass(slots=True)
class BatchDesc:
    """What a forward pass needs besides the pools (host lists; out_loc (T,) int64)."""

    input_ids: list[int]
    out_loc: torch.Tensor
    req_pool_indices: list[int]
    prefix_lens: list[int]
    extend_lens: list[int]
    logits_indices: list[int]
    # Per request: how many of its new tokens (the first ones) are prompt tokens.
    prompt_tokens: list[int]


class BatchLink:
    """Rank 0 `send`s each batch (and `send_stop` once); the other ranks `recv` them."""

    def __init__(self, comm: BaseComm, req_to_token_pool: ReqToTokenPool) -> None:
        self.comm = comm
        self.pool = req_to_token_pool
        self.device = req_to_token_pool.req_to_token.device

    def send(self, d: BatchDesc) -> None:
        """Rank 0: broadcast `d` and the req_to_token rows it reads."""
        if self.comm.world_size == 1:
            return
        b, t, n = len(d.extend_lens), len(d.input_ids), len(d.logits_indices)
        table = self.pool.req_to_token
        rows = [
            table[r, : p + e] for r, p, e in zip(d.req_pool_indices, d.prefix_lens, d.extend_lens)
        ]
        lists = torch.tensor(
            d.input_ids
            + [0] * t
            + d.req_pool_indices
            + d.prefix_lens
            + d.extend_lens
            + d.prompt_tokens
            + d.logits_indices,
            dtype=torch.int64,
            device=self.device,
        )
        lists[t : 2 * t] = d.out_loc
        payload = torch.cat([lists, *(r.to(torch.int64) for r in rows)])
        header = [_FORWARD, b, t, n, payload.numel() - lists.numel(), 0]
        self.comm.broadcast(torch.tensor(header, dtype=torch.int64, device=self.device))
        self.comm.broadcast(payload)

    def send_stop(self) -> None:
        """Rank 0: tell the other ranks to leave their loop."""
        if self.comm.world_size == 1:
            return
        header = torch.zeros(_HEADER_LEN, dtype=torch.int64, device=self.device)
        self.comm.broadcast(header)

    def recv(self) -> BatchDesc | None:
        """Other ranks: the next batch, with its rows written into req_to_token; None at stop."""
        header = self.comm.broadcast(
            torch.zeros(_HEADER_LEN, dtype=torch.int64, device=self.device)
        )
        kind, b, t, n, r, _ = header.tolist()
        if kind == _STOP:
            return None
        payload = self.comm.broadcast(
            torch.empty(2 * t + 4 * b + n + r, dtype=torch.int64, device=self.device)
        )
        head = payload[: 2 * t + 4 * b + n].tolist()
        d = BatchDesc(
            input_ids=head[:t],
            out_loc=payload[t : 2 * t],
            req_pool_indices=head[2 * t : 2 * t + b],
            prefix_lens=head[2 * t + b : 2 * t + 2 * b],
            extend_lens=head[2 * t + 2 * b : 2 * t + 3 * b],
            logits_indices=head[2 * t + 4 * b :],
            prompt_tokens=head[2 * t + 3 * b : 2 * t + 4 * b],
        )
        offset = 2 * t + 4 * b + n
        for row, p, e in zip(d.req_pool_indices, d.prefix_lens, d.extend_lens):
            self.pool.req_to_token[row, : p + e] = payload[offset : offset + p + e]
            offset += p + e
        return d
