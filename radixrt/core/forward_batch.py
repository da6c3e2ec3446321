"""ForwardBatch: the tensors one forward pass reads, built from a scheduler Batch (a short
extend of output tokens after its prefix, a draft being verified or tokens a grammar forced,
becomes one decode row per token where the attention backend decodes such rows:
`split_short_extends`), and the slots for what higher floors own and the pass reads: the
request-to-slot table and KV buffers (cache/memory_pool.py) and the attention backend
(model/attention/base.py), as Protocols."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


class ForwardMode(enum.Enum):
    EXTEND = "extend"  # any mix of prefill chunks and single-token steps
    DECODE = "decode"  # every row computes exactly one token after a non-empty prefix


# A request computing at most this many output tokens after its prefix (a draft being
# verified, forced tokens) may run as that many decode rows (`split_short_extends`).
MAX_ROWS_PER_REQUEST = 16


class ReqTokenTable(Protocol):
    """`ForwardBatch.req_to_token_pool` (ReqToTokenPool): each request row's KV slots."""

    @property
    def req_to_token(self) -> torch.Tensor:
        """(max_reqs, max_context_len) int32: row -> the slot of each of its token positions."""
        ...


class KVBuffers(Protocol):
    """`ForwardBatch.token_to_kv_pool` (TokenToKVPool): each layer's K/V buffers by slot."""

    @property
    def page_size(self) -> int: ...

    @property
    def dtype(self) -> torch.dtype: ...

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's K and V buffers; a window layer's are indexed through `slot_map`."""
        ...

    def slot_map(self, layer_id: int) -> torch.Tensor | None:
        """A window layer's (capacity + 1,) int64 slot -> row map; None: indexed by slot."""
        ...

    def set_kv_buffer(
        self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Write k, v (num_tokens, num_kv_heads, head_dim) at slots `loc` (num_tokens,)."""
        ...


class AttnBackend(Protocol):
    """`ForwardBatch.attn_backend` (BaseAttnBackend): attention over the batch's KV."""

    @property
    def decodes_request_rows(self) -> bool:
        """A decode batch may hold several consecutive rows of one request (its draft)."""
        ...

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: Any,  # model/attention/base.py: AttentionLayer
        fb: ForwardBatch,
    ) -> torch.Tensor:
        """Store k, v at `fb.out_loc` and return the attention output (T, heads * head_dim)."""
        ...


@dataclass
class ForwardBatch:
    """Packed (ragged) batch: B rows, T = sum(extend_seq_lens) new tokens, no padding.

    Row i computes tokens at positions extend_prefix_lens[i] .. seq_lens[i]-1; their new
    K/V go to out_loc[extend_start_loc[i] : extend_start_loc[i] + extend_seq_lens[i]], and
    req_to_token[req_pool_indices[i], :seq_lens[i]] already lists every slot it attends to.
    A row is a request, except in a decode batch built from short extends: there a request
    computing e tokens is e consecutive rows sharing its req_to_token row, with seq_lens
    L+1 .. L+e (causal within its new tokens); every row's K/V is stored before any row
    attends (the backends' contract), so row j reads the K/V of the rows before it.
    """

    mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor  # (T,) int64
    positions: torch.Tensor  # (T,) int64
    out_loc: torch.Tensor  # (T,) int64 KV slots for the new tokens
    req_pool_indices: torch.Tensor  # (B,) int64
    seq_lens: torch.Tensor  # (B,) int64: prefix + extend
    extend_prefix_lens: torch.Tensor  # (B,) int64
    extend_seq_lens: torch.Tensor  # (B,) int64
    extend_start_loc: torch.Tensor  # (B,) int64
    # Host copies, for backends and loops that need Python ints.
    seq_lens_cpu: list[int]
    extend_prefix_lens_cpu: list[int]
    extend_seq_lens_cpu: list[int]
    # Rows of the packed hidden states whose logits are wanted: (N,) int64.
    logits_indices: torch.Tensor
    req_to_token_pool: ReqTokenTable
    token_to_kv_pool: KVBuffers
    attn_backend: AttnBackend
    # Per row: its new tokens are prompt tokens, computed as an extend however few they are,
    # a single one included, so a prompt computes the same way however much of it the cache
    # held (empty, as in a batch built without `build`: none are).
    prompt_rows_cpu: list[bool] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    def is_decode_row(self, i: int) -> bool:
        """Whether row i computes one output token after a non-empty prefix (attended as a
        decode row, in a decode batch or beside extends)."""
        prompt = bool(self.prompt_rows_cpu) and self.prompt_rows_cpu[i]
        return _decodes(self.extend_prefix_lens_cpu[i], self.extend_seq_lens_cpu[i], prompt)

    @classmethod
    def build(
        cls,
        *,
        input_ids: list[int],
        out_loc: torch.Tensor,
        req_pool_indices: list[int],
        prefix_lens: list[int],
        extend_lens: list[int],
        logits_indices: list[int],
        req_to_token_pool: ReqTokenTable,
        token_to_kv_pool: KVBuffers,
        attn_backend: AttnBackend,
        device: torch.device,
        prompt_tokens: list[int] | None = None,
    ) -> ForwardBatch:
        """Pack host lists into device tensors; positions run from prefix_len to seq_len - 1.
        `prompt_tokens`: per request, how many of its new tokens (the first ones) are prompt
        tokens (None: none are). Where `attn_backend.decodes_request_rows`, a request's short
        run of output tokens becomes one decode row per token (`split_short_extends`); a
        decode batch when every row computes one output token after a non-empty prefix."""
        counts = list(prompt_tokens) if prompt_tokens is not None else [0] * len(extend_lens)
        if attn_backend.decodes_request_rows:
            req_pool_indices, prefix_lens, extend_lens, prompts = split_short_extends(
                req_pool_indices, prefix_lens, extend_lens, counts
            )
        else:
            prompts = [m > 0 for m in counts]
        batch_size = len(extend_lens)
        seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
        positions: list[int] = []
        starts: list[int] = []
        for p, e in zip(prefix_lens, extend_lens):
            starts.append(len(positions))
            positions.extend(range(p, p + e))
        is_decode = all(map(_decodes, prefix_lens, extend_lens, prompts))

        # One host-to-device copy for all eight index lists (each a blocking copy on CUDA);
        # the fields are views of its pieces.
        lists = (input_ids, positions, req_pool_indices, seq_lens, prefix_lens, extend_lens,
                 starts, logits_indices)  # fmt: skip
        flat = torch.tensor([v for x in lists for v in x], dtype=torch.int64).to(device)
        ids, pos, rows, lens, prefix, extend, start, logits = flat.split([len(x) for x in lists])

        return cls(
            mode=ForwardMode.DECODE if is_decode else ForwardMode.EXTEND,
            batch_size=batch_size,
            input_ids=ids,
            positions=pos,
            out_loc=out_loc.to(device=device, dtype=torch.int64),
            req_pool_indices=rows,
            seq_lens=lens,
            extend_prefix_lens=prefix,
            extend_seq_lens=extend,
            extend_start_loc=start,
            seq_lens_cpu=seq_lens,
            extend_prefix_lens_cpu=list(prefix_lens),
            extend_seq_lens_cpu=list(extend_lens),
            logits_indices=logits,
            req_to_token_pool=req_to_token_pool,
            token_to_kv_pool=token_to_kv_pool,
            attn_backend=attn_backend,
            prompt_rows_cpu=prompts,
        )


def prompt_tokens_of(prompt_len: int, kv_len: int, extend_len: int) -> int:
    """How many of the `extend_len` tokens a step computes from position `kv_len` on are
    prompt tokens (a prompt of `prompt_len`): the first ones, up to the prompt's end."""
    return min(max(prompt_len - kv_len, 0), extend_len)


def _decodes(prefix_len: int, extend_len: int, prompt: bool) -> bool:
    """Whether a row computes one output token after a non-empty prefix: a decode row."""
    return extend_len == 1 and prefix_len > 0 and not prompt


def split_short_extends(
    rows: list[int], prefix_lens: list[int], extend_lens: list[int], prompt_tokens: list[int]
) -> tuple[list[int], list[int], list[int], list[bool]]:
    """(rows, prefix_lens, extend_lens, prompts), one entry per row of the pass: a request's
    new tokens that are output tokens (a draft being verified, tokens a grammar forced),
    1..MAX_ROWS_PER_REQUEST of them after a non-empty prefix, become one decode row each; its
    prompt tokens (the first `prompt_tokens[i]` of its new tokens) stay one extend whatever
    their number (flagged in `prompts`: ForwardBatch.prompt_rows_cpu), so a prompt computes
    alike however much of it the cache held. A request that ends its prompt and verifies a
    draft after it is thus an extend row followed by decode rows on the same req_to_token
    row; the backends store every row's K/V before any row attends, so its decode rows read
    the prompt's K/V of the same pass. Where the output tokens are more than
    MAX_ROWS_PER_REQUEST (or there is no prefix), the request stays one row, flagged as a
    prompt when it holds prompt tokens. Packed tokens, positions, slots and logits rows stay
    as they are. Where the attention backend `decodes_request_rows`, a decode row computes
    exactly what a decode step would, in a decode pass or beside prefills."""
    out: tuple[list[int], list[int], list[int], list[bool]] = ([], [], [], [])

    def add(row: int, p: int, e: int, prompt: bool) -> None:
        out[0].append(row)
        out[1].append(p)
        out[2].append(e)
        out[3].append(prompt)

    for row, p, e, m in zip(rows, prefix_lens, extend_lens, prompt_tokens, strict=True):
        m = min(max(m, 0), e)
        outputs = e - m
        if p + m == 0 or not 0 < outputs <= MAX_ROWS_PER_REQUEST or (m == 0 and e == 1):
            add(row, p, e, m > 0)  # one row: an extend, or a single decode row
            continue
        if m:
            add(row, p, m, True)
        for j in range(outputs):
            add(row, p + m + j, 1, False)
    return out
