"""ModelRunner: owns the model weights, the KV pools and the attention backend on one device."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from torch import nn

from radixrt.cache.kv_dtype import KV_TORCH_DTYPES, kv_dtype_name, resolve_kv_dtype
from radixrt.core import Batch
from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.core.forward_batch import ForwardBatch, prompt_tokens_of
from radixrt.executor.cuda_graph import capture_decode_graphs
from radixrt.executor.kv_memory import NOTHING_BESIDE, KVBeside, build_kv_memory
from radixrt.executor.tp_batch import BatchDesc, BatchLink
from radixrt.executor.tp_group import NullTPGroup, TPGroup
from radixrt.model.attention import create_attention_backend
from radixrt.model.cpu.guard import KernelPlan
from radixrt.model.cpu.kernels import BF16_DOT_ISAS
from radixrt.model.cpu.runtime import (
    bf16_on_kernels,
    fuse_cpu_decode_layers,
    init_cpu_kernels,
    keep_freed_memory,
)
from radixrt.model.families import get_model_cls
from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.empty import build_empty
from radixrt.model.families.loader import (
    load_hf_config,
    load_weight_slices,
    load_weights,
    resolve_model_path,
)
from radixrt.model.families.tp_partition import check_tp_size
from radixrt.model.parallel.comm import BaseComm

logger = logging.getLogger("radixrt")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str, rank: int | None = None) -> torch.device:
    """The device named by ModelConfig.device; tensor-parallel rank r (not None) uses CUDA
    device r modulo the devices this host has."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA device")
    if name == "cuda" and rank is not None:
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device(name)


def _decode_read_bytes(model: nn.Module) -> int:
    """The weight bytes a decode step reads once the linear layers are packed (int8 or
    bfloat16): what each packed linear runs decode-sized calls on (its panels and scales, or
    its torch copy) and its bias, and every parameter but the embedding tables (looked up by
    row)."""
    from radixrt.model.cpu.layers import PackedLinear

    embedding = {id(p) for m in model.modules() if "Embedding" in type(m).__name__
                 for p in m.parameters()}  # fmt: skip
    params = sum(p.nbytes for p in model.parameters() if id(p) not in embedding)
    packed = 0
    for m in model.modules():
        if isinstance(m, PackedLinear):
            read = (m.packed, m.scale, m.bias) if m.small else (m.weight, m.bias)
            packed += sum(t.nbytes for t in read if t is not None)
    return params + packed


class ModelRunner:
    """Loads the model, sizes and owns the KV pools, and runs forward passes.

    `model` (benchmarks only) replaces loading from model_config.model_path: an nn.Module on
    the device whose `config` is an ArchConfig; its parameters' dtype overrides
    model_config.dtype, and model_path is then a placeholder naming no folder.

    Tensor parallelism (model_config.tp_size > 1): without `comm` this runner is rank 0; it
    starts the other ranks (`tp_group`) and broadcasts every batch to them (`batch_link`).
    A worker rank passes its `comm` and runs what `batch_link.recv()` returns.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        cache_config: CacheConfig,
        max_running_requests: int,
        model: nn.Module | None = None,
        comm: BaseComm | None = None,
        kv_beside: KVBeside = NOTHING_BESIDE,
    ) -> None:
        self.model_config = model_config
        self.kv_beside = kv_beside  # a draft model's K/V and weights: out of the KV budget
        self.cache_config = cache_config
        self.tp_group: NullTPGroup = NullTPGroup()
        self._in_forward = False
        self.comm = comm or self.tp_group.comm
        self._init_device()
        try:
            if model is None:
                self._init_model(max_running_requests)
            else:
                self._init_given_model(model)
            self._init_cpu_kernels()
            self._init_memory_pool(max_running_requests)
        except BaseException:
            self.tp_group.stop()
            raise
        self._init_attention_backend()
        if self.cpu_kernels.fuses_decode_layers and self.attn_backend.fuses_cpu_decode_layers:
            fuse_cpu_decode_layers(self.model)
        self._init_cuda_graphs(max_running_requests)
        self.batch_link = BatchLink(self.comm, self.req_to_token_pool)

    @property
    def weight_form(self) -> str | None:
        """How the weights differ from the checkpoint's in `dtype` (None: they do not): the
        quantization, or bfloat16 linear weights (on AMX tiles and VDPBF16PS the linears'
        inputs are rounded too, so the bfloat16 forms compute different KV as well)."""
        if self.bf16_weights:
            isa = self.cpu_kernels.isa
            return f"bf16-weights-{isa}" if isa in BF16_DOT_ISAS else "bf16-weights"
        return self.model_config.quantization

    def shutdown(self) -> None:
        """Rank 0: stop the other ranks; no forward may follow. Nothing to do at tp=1."""
        group, self.tp_group = self.tp_group, NullTPGroup()
        if group.comm.world_size > 1 and not self._in_forward:  # else the ranks are mid-pass
            try:
                self.batch_link.send_stop()
            except RuntimeError as e:  # a rank already gone: the group is stopped below
                logger.warning("could not send stop to the tensor-parallel ranks: %s", e)
        group.stop()

    def _init_device(self) -> None:
        rank = self.comm.rank if self.model_config.tp_size > 1 else None
        self.device = resolve_device(self.model_config.device, rank)
        name = self.model_config.dtype
        if name == "auto":
            name = "bfloat16" if self.device.type == "cuda" else "float32"
        # bfloat16 on the CPU kernels: bfloat16 linear weights, float32 everything else (the
        # model loads in float32 and the kernels' swap converts its linear layers).
        self.bf16_weights = self.device.type == "cpu" and bf16_on_kernels(self.model_config)
        self.dtype = torch.float32 if self.bf16_weights else _DTYPES[name]

    def _init_model(self, max_running_requests: int) -> None:
        t0 = time.perf_counter()
        self.model_path = resolve_model_path(self.model_config.model_path)
        self.hf_config = load_hf_config(self.model_path)
        self.arch = ArchConfig.from_hf(self.hf_config)
        ctx = self.model_config.context_length or self.arch.max_position_embeddings
        self.context_len = ctx
        cls = get_model_cls(self.arch.architecture)
        tp = self.model_config.tp_size
        check_tp_size(self.arch, tp)
        local = tp // self.model_config.nnodes
        if tp > 1 and self.device.type == "cuda" and local > torch.cuda.device_count():
            raise ValueError(
                f"--tp {tp} needs {local} CUDA devices on this host, "
                f"torch sees {torch.cuda.device_count()}"
            )
        if tp > 1 and self.comm.world_size == 1:  # rank 0: start the other ranks
            level = logging.getLevelName(logger.getEffectiveLevel()).lower()
            self.tp_group = TPGroup(
                self.model_config, self.cache_config, max_running_requests, self.device, level
            )
            self.comm = self.tp_group.comm
        # No random init: every tensor comes from the checkpoint. In the dtype at once:
        # materialising in float32 and converting would leave the float32 copy in CUDA's
        # cache, where mem_get_info (the KV pool's budget) does not count it free.
        model = build_empty(lambda: cls(self.arch, ctx, self.comm), self.dtype, self.device)
        model.load_weights(
            load_weights(self.model_path) if tp == 1 else load_weight_slices(self.model_path)
        )
        self.model = model.to(self.device).eval()
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        logger.info(
            "loaded %s (%s, %.1fM params, %s) in %.1f s",
            self.model_path.name,
            self.arch.architecture,
            sum(p.numel() for p in self.model.parameters()) / 1e6,
            self.dtype,
            time.perf_counter() - t0,
        )

    def _init_given_model(self, model: nn.Module) -> None:
        arch, param = getattr(model, "config", None), next(model.parameters())
        if not isinstance(arch, ArchConfig) or param.device.type != self.device.type:
            raise ValueError(
                f"the given model needs an ArchConfig `config` and {self.device} weights"
            )
        self.model_path = Path(f"<in-memory {type(model).__name__}>")
        self.hf_config = {}
        self.arch = arch
        self.context_len = self.model_config.context_length or self.arch.max_position_embeddings
        self.dtype = param.dtype
        self.model = model.eval()
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def _init_cpu_kernels(self) -> None:
        """On the CPU: the C heap's reuse policy and radixrt's C kernels (cpu/runtime.py);
        `cpu_kernels` is the plan of which ops run on them (`.any`: whether any does). The
        parameters are counted before the swap."""
        self.num_params = sum(p.numel() for p in self.model.parameters())
        self.cpu_kernels = KernelPlan()
        if self.model_config.quantization and self.device.type != "cpu":
            raise ValueError(
                f"--quantization {self.model_config.quantization} runs on radixrt's CPU "
                f"kernels; the model is on {self.device}"
            )
        if self.device.type == "cpu":
            keep_freed_memory()
            name = self.cache_config.kv_cache_dtype
            kv = None if name == "auto" else KV_TORCH_DTYPES.get(name, torch.float32)
            self.cpu_kernels = init_cpu_kernels(
                self.model, self.model_config, self.dtype, self.bf16_weights, kv
            )
        if self.model_config.quantization or self.bf16_weights:
            self.weight_bytes = _decode_read_bytes(self.model)

    def _init_memory_pool(self, max_running_requests: int) -> None:
        from radixrt.model.attention import get_attention_backend_cls

        self.attn_backend_name = self._choose_attention_backend()
        backend_cls = get_attention_backend_cls(self.attn_backend_name)
        window_pool = self.comm.world_size == 1 and backend_cls.reads_window_pool
        plan = self.cpu_kernels  # on the kernels, "auto" is the dtype the plan chose
        auto = KV_TORCH_DTYPES[plan.kv_dtype] if plan.any else None
        self.kv_dtype = resolve_kv_dtype(
            self.cache_config.kv_cache_dtype, self.dtype, self.device, self.attn_backend_name,
            backend_cls.reads_other_kv_dtypes, auto,
        )  # fmt: skip
        mem = build_kv_memory(
            self.arch, self._partition_heads()[1], self.kv_dtype, self.device, self.cache_config,
            self.weight_bytes, self.comm, max_running_requests, self.context_len, window_pool,
            self.kv_beside, self.dtype,
        )  # fmt: skip
        self.token_to_kv_pool, self.allocator = mem.token_to_kv_pool, mem.allocator
        self.req_to_token_pool, self.max_total_tokens = mem.req_to_token_pool, mem.capacity
        logger.info("KV pool: %d slots of %s", mem.capacity, kv_dtype_name(self.kv_dtype))
        window, layers = self.allocator.window, self.token_to_kv_pool.window_layers
        if window.window:
            logger.info("KV pool: %d slots, and %d slots for the %d sliding-window layers",
                        mem.capacity, window.capacity, len(layers))  # fmt: skip

    def _choose_attention_backend(self) -> str:
        """The configured backend, else the CPU kernels' or the device's default; then one
        that implements the model's layers (`_backend_for_layers`)."""
        from radixrt.model.attention import default_backend

        plan = self.cpu_kernels
        attention_kernels = plan.uses("decode_attention") or plan.uses("extend_attention")
        name = self.model_config.attention_backend or (
            "cpu" if attention_kernels else default_backend(self.device, self.dtype)
        )
        return self._backend_for_layers(name, chosen=bool(self.model_config.attention_backend))

    def _init_attention_backend(self) -> None:
        plan, name = self.cpu_kernels, self.attn_backend_name
        options = plan.attention_options() if name == "cpu" and plan.any else {}
        num_heads, num_kv_heads = self._partition_heads()
        self.attn_backend = create_attention_backend(
            name,
            self.device,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=self.arch.head_dim,
            **options,
        )

    def _backend_for_layers(self, name: str, chosen: bool) -> str:
        """`name`, if it implements every feature the model's attention layers use (sliding
        windows, soft caps); else torch_native, or a ValueError when the user chose `name`."""
        from radixrt.model.attention import get_attention_backend_cls
        from radixrt.model.attention.base import layer_features
        from radixrt.model.layers.attention import RadixAttention

        needs: set[str] = set()
        for m in self.model.modules():
            if isinstance(m, RadixAttention):
                needs |= layer_features(m.layer)
        lacking = sorted(needs - get_attention_backend_cls(name).supports)
        if not lacking:
            return name
        if chosen:
            raise ValueError(
                f"attention backend {name!r} does not implement {', '.join(lacking)}, which "
                f"{self.arch.architecture} uses; choose --attention-backend torch_native"
            )
        logger.info("attention: %s lacks %s; using torch_native", name, ", ".join(lacking))
        return "torch_native"

    def _partition_heads(self) -> tuple[int, int]:
        """(query heads, KV heads) on this rank."""
        part = getattr(self.model, "partition", None)
        if part is None:
            return self.arch.num_attention_heads, self.arch.num_key_value_heads
        return part.num_heads, part.num_kv_heads

    def _init_cuda_graphs(self, max_running_requests: int) -> None:
        """Capture decode graphs on CUDA unless disabled or unsupported (cuda_graph.py)."""
        self.graph_runner = None
        if self.device.type == "cuda":
            self.graph_runner = capture_decode_graphs(
                self.model, self.attn_backend, self.req_to_token_pool, self.token_to_kv_pool,
                self.model_config, self.comm.world_size, max_running_requests,
            )  # fmt: skip

    def forward(
        self, batch: Batch, out_loc: torch.Tensor, logits_indices: list[int]
    ) -> torch.Tensor:
        """Run one pass; new K/V go to `out_loc` (T,). Returns (N, vocab) float32 logits.

        With tensor parallelism the batch is first broadcast, so every rank runs it too."""
        input_ids: list[int] = []
        for r in batch.reqs:
            input_ids.extend(r.step_ids())
        rows: list[int] = []
        prefix_lens: list[int] = []
        extend_lens: list[int] = []
        # How many of each entry's new tokens (the first ones) are prompt tokens: an extend
        # however few; the rest (a draft verified after the prompt's end) output tokens.
        prompts: list[int] = []
        for r in batch.reqs:
            if r.draft_rows:  # a draft tree: one decode row per node, on its branch's row
                rows += [row for row, _ in r.draft_rows]
                prefix_lens += [p for _, p in r.draft_rows]
                extend_lens += [1] * len(r.draft_rows)
                prompts += [0] * len(r.draft_rows)
            else:
                rows.append(r.req_pool_idx)  # type: ignore[arg-type]
                prefix_lens.append(r.kv_len)
                extend_lens.append(r.extend_len)
                prompts.append(prompt_tokens_of(r.prompt_len, r.kv_len, r.extend_len))
        desc = BatchDesc(
            input_ids=input_ids,
            out_loc=out_loc,
            req_pool_indices=rows,
            prefix_lens=prefix_lens,
            extend_lens=extend_lens,
            logits_indices=logits_indices,
            prompt_tokens=prompts,
        )
        self._in_forward = True  # stays set if the pass raises: the ranks' collectives are torn
        self.batch_link.send(desc)
        logits = self.forward_desc(desc)
        self._in_forward = False
        return logits

    def forward_desc(self, d: BatchDesc) -> torch.Tensor:
        """Run one described pass: (N, vocab) float32 logits (the same on every rank)."""
        fb = ForwardBatch.build(
            input_ids=d.input_ids,
            out_loc=d.out_loc,
            req_pool_indices=d.req_pool_indices,
            prefix_lens=d.prefix_lens,
            extend_lens=d.extend_lens,
            logits_indices=d.logits_indices,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool=self.token_to_kv_pool,
            attn_backend=self.attn_backend,
            device=self.device,
            prompt_tokens=d.prompt_tokens,
        )
        return self.forward_batch(fb)

    def forward_batch(self, fb: ForwardBatch) -> torch.Tensor:
        """Run a built ForwardBatch (a decode batch replays a CUDA graph when one fits):
        (N, vocab) float32 logits of fb.logits_indices."""
        if self.graph_runner is not None and self.graph_runner.can_run(fb):
            return self.graph_runner.replay(fb)
        self.attn_backend.init_forward_metadata(fb)
        return self.model(fb)
