"""Throughput of a random-weight Llama model, each beside a roofline measured in the same run.

Prefill is judged against the matmul rate (compute-bound), decode against HBM bandwidth and the
matmul rate together (whichever bounds the step). Weights are random: only speed is measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from benchmarks.fixtures.synthetic import SyntheticPools
from radixrt.executor.cuda_graph import CudaGraphRunner
from radixrt.model.attention import create_attention_backend
from radixrt.model.attention.base import BaseAttnBackend
from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.llama import LlamaForCausalLM

_LLAMA_COMMON: dict = dict(
    architecture="LlamaForCausalLM",
    rms_norm_eps=1e-5,
    attention_bias=False,
    o_proj_bias=False,
    mlp_bias=False,
    hidden_act="silu",
)
LLAMA3_8B = ArchConfig(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    max_position_embeddings=131072,
    tie_word_embeddings=False,
    **_LLAMA_COMMON,
)
SMOLLM2_135M = ArchConfig(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    rope_theta=100000.0,
    rope_scaling=None,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    **_LLAMA_COMMON,
)
TINY_LLAMA = ArchConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    rope_theta=10000.0,
    rope_scaling=None,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
    **_LLAMA_COMMON,
)


@dataclass(frozen=True, slots=True)
class Roofline:
    """Ceilings measured on this device: a large copy and a large matmul."""

    bytes_per_s: float  # device-to-device copy, bytes read + written
    flops_per_s: float  # dense matmul in the model dtype


@dataclass(frozen=True, slots=True)
class BenchResult:
    name: str  # e.g. "prefill 8192" or "decode b128 ctx512"
    backend: str
    tokens_per_s: float
    roofline_tokens_per_s: float
    ms_per_step: float

    @property
    def fraction_of_roofline(self) -> float:
        return self.tokens_per_s / self.roofline_tokens_per_s


def measure_roofline(
    device: torch.device, dtype: torch.dtype, copy_mib: int, matmul_n: int
) -> Roofline:
    """Time a copy of `copy_mib` MiB and an n x n x n matmul, best of a few runs each."""
    src = torch.empty(copy_mib * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_s = time_it(lambda: dst.copy_(src), device, iters=10)
    a = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
    b = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
    mm_s = time_it(lambda: torch.matmul(a, b), device, iters=10)
    return Roofline(2 * src.numel() / copy_s, 2 * matmul_n**3 / mm_s)


def random_llama(
    arch: ArchConfig,
    device: torch.device,
    dtype: torch.dtype,
    max_position: int,
    std: float = 0.02,
) -> LlamaForCausalLM:
    """The model with N(0, std) weights made directly on `device` in `dtype` (norms at 1)."""
    with torch.device("meta"):
        model = LlamaForCausalLM(arch, max_position=max_position)
    model = model.to(dtype).to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, std)
    return model.eval()


def time_it(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 2) -> float:
    """Mean seconds per call of `fn` after `warmup` calls, synchronising a CUDA device."""
    for _ in range(warmup):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / iters


class LlamaBench:
    """Drives `model` with synthetic batches: init_forward_metadata + forward per step, or, for
    decode with `graph_batch_sizes`, a CUDA-graph replay (inputs, plan, replay) per step."""

    def __init__(
        self,
        arch: ArchConfig,
        model: LlamaForCausalLM,
        backend_name: str,
        roof: Roofline,
        pools: SyntheticPools,
        graph_batch_sizes: tuple[int, ...] = (),
    ) -> None:
        self.arch, self.model, self.roof, self.pools = arch, model, roof, pools
        self.backend_name = backend_name + ("+graph" if graph_batch_sizes else "")
        self.device = pools.device
        self.backend = make_backend(backend_name, arch, self.device)
        self.graphs: CudaGraphRunner | None = None
        if graph_batch_sizes:
            self.graphs = CudaGraphRunner(
                model, self.backend, pools.req_to_token, pools.kv, list(graph_batch_sizes)
            )
        # Matmul weights per token: the decoder layers' and the LM head's (one row in prefill).
        self.layer_params = sum(p.numel() for p in model.model.layers.parameters() if p.dim() == 2)
        self.head_params = arch.vocab_size * arch.hidden_size
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.elem = torch.empty((), dtype=pools.kv.dtype).element_size()

    def prefill(self, num_tokens: int, iters: int) -> BenchResult:
        """One request of `num_tokens` new tokens, no prefix."""
        self.pools.reset()
        fb = self.pools.make_batch([0], [num_tokens], self.backend, vocab_size=self.arch.vocab_size)
        s = time_it(lambda: self._step(fb), self.device, iters, warmup=1)
        a = self.arch
        attn = 2 * a.num_hidden_layers * a.num_attention_heads * a.head_dim * num_tokens**2
        flops = 2 * self.layer_params * num_tokens + attn + 2 * self.head_params
        roof_s = flops / self.roof.flops_per_s
        return BenchResult(
            f"prefill {num_tokens}", self.backend_name, num_tokens / s, num_tokens / roof_s, s * 1e3
        )

    def decode(self, batch: int, context: int, iters: int) -> BenchResult:
        """`batch` requests each with `context` cached tokens (random K/V) compute one token."""
        self.pools.reset()
        fb = self.pools.make_batch(
            [context] * batch, [1] * batch, self.backend, vocab_size=self.arch.vocab_size
        )
        step = self._step if self.graphs is None else self.graphs.replay
        s = time_it(lambda: step(fb), self.device, iters)
        a = self.arch
        kv_per_token = a.num_hidden_layers * 2 * a.num_key_value_heads * a.head_dim * self.elem
        attn = 4 * a.num_hidden_layers * a.num_attention_heads * a.head_dim * context
        flops = batch * (2 * (self.layer_params + self.head_params) + attn)
        read_s = (self.weight_bytes + batch * context * kv_per_token) / self.roof.bytes_per_s
        roof_s = max(read_s, flops / self.roof.flops_per_s)
        return BenchResult(
            f"decode b{batch} ctx{context}", self.backend_name, batch / s, batch / roof_s, s * 1e3
        )

    def _step(self, fb: object) -> None:
        self.backend.init_forward_metadata(fb)  # type: ignore[arg-type]
        self.model(fb)


def greedy_tokens(
    model: LlamaForCausalLM,
    backend: BaseAttnBackend,
    pools: SyntheticPools,
    prompts: list[list[int]],
    max_new_tokens: int,
) -> tuple[list[list[int]], torch.Tensor]:
    """Greedy continuation of each prompt, all in one batch: (new token ids per prompt, first
    step's logits (B, vocab) float32)."""
    pools.reset()
    ids = [t for p in prompts for t in p]
    lens = [len(p) for p in prompts]
    fb = pools.make_batch([0] * len(prompts), lens, backend, input_ids=ids)
    rows = fb.req_pool_indices.tolist()
    backend.init_forward_metadata(fb)
    logits = first_logits = model(fb)
    out: list[list[int]] = [[] for _ in prompts]
    for step in range(max_new_tokens):
        nxt = logits.argmax(-1).tolist()
        for toks, t in zip(out, nxt, strict=True):
            toks.append(t)
        if step + 1 == max_new_tokens:
            break
        fb = pools.decode_batch(rows, lens, nxt, backend)
        lens = [n + 1 for n in lens]
        backend.init_forward_metadata(fb)
        logits = model(fb)
    return out, first_logits


def make_backend(name: str, arch: ArchConfig, device: torch.device) -> BaseAttnBackend:
    """The named backend for `arch`'s head layout."""
    return create_attention_backend(
        name,
        device,
        num_heads=arch.num_attention_heads,
        num_kv_heads=arch.num_key_value_heads,
        head_dim=arch.head_dim,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
