"""CUDA graphs for decode: the model's decode forward captured once per padded batch size.

A decode step of B requests replays the graph of the smallest captured size bs >= B. Inputs
are copied into static buffers first; rows B..bs-1 are padding: token 0 at position 0, its
K/V written to the pool's padding slot 0 and attending to slot 0 alone, its logits dropped.
Slot 0 therefore holds garbage after a replay, which is why only backends that never read
slot 0 for a real request (flashinfer, triton; not torch_native) implement GraphAttnBackend.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from radixrt.core.forward_batch import ForwardBatch, ForwardMode

if TYPE_CHECKING:
    from torch import nn

    from radixrt.cache.memory_pool import ReqToTokenPool, TokenToKVPool
    from radixrt.core.config import ModelConfig
    from radixrt.model.attention.base import BaseAttnBackend

logger = logging.getLogger("radixrt")

_WARMUP_RUNS = 2  # eager runs before the first capture: lazy caches, cuBLAS handles, JIT


@runtime_checkable
class GraphAttnBackend(Protocol):
    """What an attention backend adds to run under CUDA graphs (flashinfer_backend.py).

    `init_cuda_graph_state` runs once before any capture; `init_forward_metadata_capture(fb)`
    before capturing batch size fb.batch_size (fb holds dummy inputs); and
    `init_forward_metadata_replay(fb, bs)` before each replay of size bs for the real decode
    batch fb (fb.batch_size <= bs). None of them may run inside a capture; the kernels the
    layers launch must read their page table from buffers that stay put between replays.
    """

    def init_cuda_graph_state(self, max_bs: int, max_num_indices: int) -> None: ...

    def init_forward_metadata_capture(self, fb: ForwardBatch) -> None: ...

    def init_forward_metadata_replay(self, fb: ForwardBatch, bs: int) -> None: ...


def capture_batch_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8 up to max_bs, and max_bs itself."""
    sizes = [bs for bs in (1, 2, 4, 8) if bs <= max_bs]
    sizes += list(range(16, max_bs + 1, 8))
    if sizes[-1] != max_bs:
        sizes.append(max_bs)
    return sizes


class CudaGraphRunner:
    """Captures `model`'s decode forward for each batch size and replays it.

    All graphs share one memory pool (captured largest first); each keeps its output logits
    (bs, vocab) float32 alive in that pool, so a replay's result is valid until the next
    replay of the same size: `replay` returns a copy of the real rows.
    """

    def __init__(
        self,
        model: nn.Module,
        attn_backend: BaseAttnBackend,
        req_to_token_pool: ReqToTokenPool,
        token_to_kv_pool: TokenToKVPool,
        batch_sizes: list[int],
    ) -> None:
        if not isinstance(attn_backend, GraphAttnBackend):
            raise TypeError(f"{type(attn_backend).__name__} cannot run under CUDA graphs")
        self.model = model
        self.attn_backend = attn_backend
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool
        self.device = token_to_kv_pool.device
        self.batch_sizes = sorted(set(batch_sizes))
        self.max_bs = self.batch_sizes[-1]
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}  # bs -> (bs, vocab) float32 in the pool
        self.num_replays = 0
        self._init_buffers()
        t0 = time.perf_counter()
        self._capture_all()
        logger.info(
            "captured CUDA graphs for decode batch sizes %s in %.1f s",
            self.batch_sizes,
            time.perf_counter() - t0,
        )

    def can_run(self, fb: ForwardBatch) -> bool:
        return fb.mode == ForwardMode.DECODE and fb.batch_size <= self.max_bs

    def replay(self, fb: ForwardBatch) -> torch.Tensor:
        """Run decode batch fb through its graph: (N, vocab) float32 logits of fb.logits_indices."""
        b = fb.batch_size
        bs = next(s for s in self.batch_sizes if s >= b)
        self.input_ids[:b].copy_(fb.input_ids)
        self.positions[:b].copy_(fb.positions)
        self.out_loc[:b].copy_(fb.out_loc)
        self.req_pool_indices[:b].copy_(fb.req_pool_indices)
        self.seq_lens[:b].copy_(fb.seq_lens)
        if bs > b:  # padding rows: token 0 at position 0, K/V to slot 0
            for buf in (self.input_ids, self.positions, self.out_loc, self.req_pool_indices):
                buf[b:bs].zero_()
            self.seq_lens[b:bs].fill_(1)
        self.attn_backend.init_forward_metadata_replay(fb, bs)
        self.graphs[bs].replay()
        self.num_replays += 1
        return self.outputs[bs][fb.logits_indices]

    # ---- capture ------------------------------------------------------------------------

    def _init_buffers(self) -> None:
        n, dev = self.max_bs, self.device
        # Static inputs, each (max_bs,) int64; a graph of size bs reads the first bs rows.
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(n, dtype=torch.int64, device=dev)
        self.out_loc = torch.zeros(n, dtype=torch.int64, device=dev)
        self.req_pool_indices = torch.zeros(n, dtype=torch.int64, device=dev)
        self.seq_lens = torch.ones(n, dtype=torch.int64, device=dev)
        self.ones = torch.ones(n, dtype=torch.int64, device=dev)  # extend_seq_lens
        self.arange = torch.arange(n, dtype=torch.int64, device=dev)
        max_indices = n * self.req_to_token_pool.req_to_token.shape[1]
        self.attn_backend.init_cuda_graph_state(n, max_indices)

    def _static_batch(self, bs: int) -> ForwardBatch:
        """A decode ForwardBatch over the first bs rows of the static buffers."""
        return ForwardBatch(
            mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=self.input_ids[:bs],
            positions=self.positions[:bs],
            out_loc=self.out_loc[:bs],
            req_pool_indices=self.req_pool_indices[:bs],
            seq_lens=self.seq_lens[:bs],
            extend_prefix_lens=self.positions[:bs],
            extend_seq_lens=self.ones[:bs],
            extend_start_loc=self.arange[:bs],
            seq_lens_cpu=[1] * bs,
            extend_prefix_lens_cpu=[0] * bs,
            extend_seq_lens_cpu=[1] * bs,
            logits_indices=self.arange[:bs],
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool=self.token_to_kv_pool,
            attn_backend=self.attn_backend,  # type: ignore[arg-type]
        )

    def _capture_all(self) -> None:
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(self.device)
        # Largest first: each smaller graph then fits in memory the larger ones freed.
        for i, bs in enumerate(reversed(self.batch_sizes)):
            fb = self._static_batch(bs)
            self.attn_backend.init_forward_metadata_capture(fb)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(_WARMUP_RUNS if i == 0 else 1):
                    self.model(fb)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                out = self.model(fb)
            self.graphs[bs] = graph
            self.outputs[bs] = out
        torch.cuda.synchronize(self.device)


def capture_decode_graphs(
    model: nn.Module,
    attn_backend: object,
    req_to_token_pool: ReqToTokenPool,
    token_to_kv_pool: TokenToKVPool,
    model_config: ModelConfig,
    world_size: int,
    max_running_requests: int,
) -> CudaGraphRunner | None:
    """A runner replaying decode graphs at capture_batch_sizes(min(--cuda-graph-max-bs, max
    running requests)), or None when disabled, with tensor parallelism, or when the attention
    backend cannot run inside a graph. A failed capture raises, naming the way out."""
    if model_config.disable_cuda_graph:
        return None
    if world_size > 1:
        logger.info("CUDA graphs off: not captured with tensor parallelism")
        return None
    if not isinstance(attn_backend, GraphAttnBackend):
        logger.info("CUDA graphs off: %s does not support them", type(attn_backend).__name__)
        return None
    max_bs = min(model_config.cuda_graph_max_bs, max_running_requests)
    try:
        return CudaGraphRunner(
            model, attn_backend, req_to_token_pool, token_to_kv_pool, capture_batch_sizes(max_bs)
        )
    except Exception as e:
        raise RuntimeError(
            f"capturing CUDA graphs failed ({type(e).__name__}: {e}); "
            "disable_cuda_graph=True (--disable-cuda-graph) runs decode eagerly"
        ) from e
