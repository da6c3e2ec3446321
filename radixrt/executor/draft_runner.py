"""DraftRunner: a speculative draft model beside the target's ModelRunner, on the same device,
with its own KV buffers indexed by the target's slot ids and read through the target's
request-to-slot table, plus scratch rows for the positions being drafted."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from radixrt.cache.memory_pool import TokenToKVPool
from radixrt.core.forward_batch import ForwardBatch
from radixrt.executor.kv_memory import KVBeside
from radixrt.executor.model_runner import ModelRunner
from radixrt.model.attention import create_attention_backend
from radixrt.model.cpu.runtime import fuse_cpu_decode_layers, init_cpu_kernels
from radixrt.model.families import get_model_cls
from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.empty import build_empty
from radixrt.model.families.loader import load_hf_config, load_weights, resolve_model_path

logger = logging.getLogger("radixrt")


class _Table:
    """A request-to-slot table for one draft pass (ForwardBatch's ReqTokenTable)."""

    def __init__(self, req_to_token: torch.Tensor) -> None:
        self.req_to_token = req_to_token


class DraftRunner:
    """Loads the draft model next to `target` and runs its passes.

    KV layout: buffer row s holds the draft model's K/V of target slot s (the slot ids the
    target's allocator hands out and the radix tree caches), so a cached prefix carries the
    draft K/V of its slots too; rows from `target_rows` on are scratch, `scratch_per_req` per
    drafting request, for the positions a step drafts (never a slot of the target's pool).
    Having a row for every target slot, it needs no window pool: the draft's sliding-window
    layers read the last `window` positions of the table, whether or not the target keeps its
    own window layers' K/V in a pool of their own.
    It runs in the target's dtype, on the CPU kernels where the target does (else torch_native).
    ValueError at load for what it does not support.
    """

    def __init__(self, path: str, target: ModelRunner, max_drafting: int,
                 scratch_per_req: int) -> None:  # fmt: skip
        t0 = time.perf_counter()
        self.device, self.dtype = target.device, target.dtype
        self.model_path = resolve_model_path(path)
        self.arch = ArchConfig.from_hf(load_hf_config(self.model_path))
        _check_pair(self.arch, target)
        cls = get_model_cls(self.arch.architecture)
        model = build_empty(lambda: cls(self.arch, target.context_len), self.dtype, self.device)
        model.load_weights(load_weights(self.model_path))
        self.model = model.eval()
        self.target_rows = target.max_total_tokens + target.token_to_kv_pool.page_size
        self.scratch_per_req = scratch_per_req
        self.num_computed = 0  # tokens the draft model computed: catch-up and drafts
        num_rows = self.target_rows + max_drafting * scratch_per_req
        self.kv = TokenToKVPool(num_rows, self.arch.num_hidden_layers,
                                self.arch.num_key_value_heads, self.arch.head_dim, self.dtype,
                                self.device)  # fmt: skip
        self._init_attention(target)
        logger.info("draft model %s (%.1fM params) loaded in %.1f s; draft KV: %d rows",
                    self.model_path.name, sum(p.numel() for p in model.parameters()) / 1e6,
                    time.perf_counter() - t0, num_rows)  # fmt: skip

    def _init_attention(self, target: ModelRunner) -> None:
        """Where the target runs radixrt's CPU kernels, the draft model does too (its linear
        layers swapped as the target's plan says, the "cpu" attention backend, decoder layers
        fused for decode passes); else torch_native."""
        name, fuse = "torch_native", False
        options: dict[str, Any] = {}
        if target.device.type == "cpu" and target.cpu_kernels.any:
            plan = init_cpu_kernels(self.model, target.model_config, self.dtype,
                                    target.bf16_weights, self.dtype)  # fmt: skip
            if plan.uses("decode_attention") or plan.uses("extend_attention"):
                name, options = "cpu", plan.attention_options()
            fuse = plan.fuses_decode_layers
        self.attn_backend = create_attention_backend(
            name, self.device, num_heads=self.arch.num_attention_heads,
            num_kv_heads=self.arch.num_key_value_heads, head_dim=self.arch.head_dim, **options,
        )  # fmt: skip
        if fuse and self.attn_backend.fuses_cpu_decode_layers:
            fuse_cpu_decode_layers(self.model)

    def scratch(self, i: int) -> torch.Tensor:
        """(scratch_per_req,) int32: the scratch rows of the i-th drafting request."""
        lo = self.target_rows + i * self.scratch_per_req
        return torch.arange(lo, lo + self.scratch_per_req, dtype=torch.int32, device=self.device)

    @torch.inference_mode()
    def forward(self, table: torch.Tensor, input_ids: list[int], out_loc: torch.Tensor,
                prefix_lens: list[int], extend_lens: list[int]) -> torch.Tensor:  # fmt: skip
        """One pass; request i reads and writes the rows table[i, :prefix + extend] (its
        new K/V at `out_loc`). Returns (B, vocab) float32 logits of each one's last token."""
        ends = torch.tensor(extend_lens).cumsum(0) - 1
        fb = ForwardBatch.build(
            input_ids=input_ids, out_loc=out_loc, req_pool_indices=list(range(len(extend_lens))),
            prefix_lens=prefix_lens, extend_lens=extend_lens, logits_indices=ends.tolist(),
            req_to_token_pool=_Table(table), token_to_kv_pool=self.kv,
            attn_backend=self.attn_backend, device=self.device,
        )  # fmt: skip
        self.attn_backend.init_forward_metadata(fb)
        self.num_computed += len(input_ids)
        return self.model(fb)


def draft_kv_beside(path: str) -> KVBeside:
    """What a draft model at `path` keeps beside the target, for the target's KV budget: K/V
    values per slot (its buffer has a row per target slot) and its weights (their files'
    bytes, an upper bound where the target's dtype is narrower than the files')."""
    folder = resolve_model_path(path)
    arch = ArchConfig.from_hf(load_hf_config(folder))
    values = 2 * arch.num_hidden_layers * arch.num_key_value_heads * arch.head_dim
    weights = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    return KVBeside(values, weights)


def _check_pair(arch: ArchConfig, target: ModelRunner) -> None:
    """ValueError unless the draft model can draft for `target` here."""
    if arch.vocab_size != target.arch.vocab_size:
        raise ValueError(
            f"the draft model's vocabulary has {arch.vocab_size} tokens, the target's "
            f"{target.arch.vocab_size}: a draft model must share the target's tokenizer"
        )
    if target.model_config.tp_size > 1:
        raise ValueError("a draft model needs --tp 1 (it is not sharded across ranks)")
    if target.device.type != "cpu" and not target.model_config.disable_cuda_graph:
        raise ValueError("a draft model on CUDA needs --disable-cuda-graph (its draft steps "
                         "are not captured)")  # fmt: skip
