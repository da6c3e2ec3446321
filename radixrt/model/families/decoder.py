"""What every decoder family is built from: the attention block, the gated MLP, the layer
stack with its embedding and ropes, and the causal-LM wrapper with its LM head.

A family module subclasses `CausalLM`, names its decoder layer class and overrides the hooks
where it differs (embedding scale, final logits). Layers take and return the residual stream
as a pair (x, residual) whose sum is the hidden state, so the norms can fuse the residual add
(`RMSNorm(x, residual)`); `residual` is None before the first layer. Parameter names follow
the Hugging Face checkpoints so weights load by name (weights.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.config_reader import SLIDING_ATTENTION
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.families.weights import load_model_weights
from radixrt.model.layers.activation import GatedActivation
from radixrt.model.layers.attention import RadixAttention
from radixrt.model.layers.linear import lm_head, row_parallel_linear, vocab_embedding
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.layers.rotary import (
    QKVRotary,
    RotaryEmbedding,
    apply_rotary,
    interleaved_to_halves,
)
from radixrt.model.parallel.comm import BaseComm, NullComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch

Rope = tuple[torch.Tensor, torch.Tensor]  # cos, sin: each (T, rotary_dim) float32
Residual = tuple[torch.Tensor, torch.Tensor]  # (x, residual): their sum is the hidden state


def norm_in(
    norm: nn.Module, x: torch.Tensor, residual: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A pre-norm layer's entry: the hidden state (x + residual; x alone before the first
    layer) normalised, and that hidden state as the new residual."""
    if residual is None:
        return norm(x), x
    return norm(x, residual)


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)), gate and up as one projection; this rank's I/tp rows."""

    # forward is exactly down_proj(act_fn(gate_up_proj(x))): the CPU kernels may run the
    # first two as one pass (radixrt/model/cpu/layers.py, CpuSiluMLP)
    cpu_gated_silu = True

    def __init__(self, cfg: ArchConfig, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        bias, inter = cfg.mlp_bias, part.inter_size
        # This rank's rows of gate_proj and up_proj, stacked: [0, I/tp) gate, [I/tp, 2I/tp) up.
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * inter, bias=bias)
        self.down_proj = row_parallel_linear(inter, cfg.hidden_size, bias, comm)
        self.act_fn = GatedActivation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class SelfAttention(nn.Module):
    """qkv projection, optional q/k norms, rotary, paged attention, output projection.

    `qk_norm`: None; "head" (a norm of head_dim shared by every head: Qwen3, Gemma 3); or
    "full" (a norm over the whole q and k projections: OLMo 2, whose statistics then span
    every rank's heads). `norm_cls` is the family's RMSNorm variant."""

    def __init__(
        self,
        cfg: ArchConfig,
        layer_id: int,
        part: TPPartition,
        comm: BaseComm,
        *,
        scaling: float | None = None,
        qk_norm: str | None = None,
        norm_cls: type[RMSNorm] = RMSNorm,
        logit_softcap: float = 0.0,
    ) -> None:
        super().__init__()
        d, h, hkv = cfg.head_dim, part.num_heads, part.num_kv_heads
        self.head_dim, self.comm = d, comm
        # This rank's heads of q_proj, k_proj and v_proj, stacked along the output rows.
        self.qkv_proj = nn.Linear(cfg.hidden_size, (h + 2 * hkv) * d, bias=cfg.attention_bias)
        self.rotary = QKVRotary(h, hkv, d, cfg.rotary_width)
        self.o_proj = row_parallel_linear(h * d, cfg.hidden_size, cfg.o_proj_bias, comm)
        self.qk_norm = qk_norm
        if qk_norm == "head":
            self.q_norm = norm_cls(d, cfg.rms_norm_eps)
            self.k_norm = norm_cls(d, cfg.rms_norm_eps)
        elif qk_norm == "full":
            self.q_norm = norm_cls(h * d, cfg.rms_norm_eps)
            self.k_norm = norm_cls(hkv * d, cfg.rms_norm_eps)
            self.q_full, self.k_full = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
        window = cfg.layer_windows[layer_id]
        self.attn = RadixAttention(
            layer_id, h, hkv, d, d**-0.5 if scaling is None else scaling, window, logit_softcap
        )

    def forward(self, rope: Rope, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        qkv = self.qkv_proj(x)
        if self.qk_norm is None:
            q, k, v = self.rotary(qkv, *rope)
        else:
            q, k, v = qkv.split(self.rotary.sizes, dim=-1)
            q, k = self._norm_qk(q, k)
            q = apply_rotary(q, *rope, self.head_dim)
            k = apply_rotary(k, *rope, self.head_dim)
        return self.o_proj(self.attn(q, k, v, fb))

    @torch.no_grad()
    def pair_rope_halves(self) -> None:
        """After loading a checkpoint whose rotary pairs are adjacent dims (rope_interleaved):
        permute each q and k head's rotary rows (weight, bias, per-head norm) into halves
        (rotary.interleaved_to_halves), so the rope runs as everywhere else. Once, at load."""
        d, rot = self.head_dim, self.rotary.rotary_dim
        order = interleaved_to_halves(rot)
        q_rows, k_rows, _ = self.rotary.sizes
        for param in (self.qkv_proj.weight, self.qkv_proj.bias):
            if param is not None:
                for start, rows in ((0, q_rows), (q_rows, k_rows)):
                    heads = param[start : start + rows].view(rows // d, d, -1)
                    heads[:, :rot] = heads[:, order.to(param.device)]
        if self.qk_norm is not None:
            for norm in (self.q_norm, self.k_norm):
                w = norm.weight.view(-1, d)
                w[:, :rot] = w[:, order.to(w.device)]

    def _norm_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (T, H*D), k (T, Hkv*D) normalised per head or over the whole projection."""
        t, d = q.shape[0], self.head_dim
        if self.qk_norm == "head":
            q = self.q_norm(q.reshape(-1, d)).view(t, -1)  # type: ignore[union-attr]
            return q, self.k_norm(k.reshape(-1, d)).view(t, -1)  # type: ignore[union-attr]
        if self.comm.world_size == 1:
            return self.q_norm(q), self.k_norm(k)  # type: ignore[return-value]
        return _sharded_norm(q, self.q_norm, self.q_full, self.comm), _sharded_norm(
            k, self.k_norm, self.k_full, self.comm
        )


def _sharded_norm(x: torch.Tensor, norm: RMSNorm, full: int, comm: BaseComm) -> torch.Tensor:
    """RMSNorm over a projection split across ranks: the mean of squares is summed over
    every rank's columns (x (T, n) this rank's, `full` columns in all)."""
    sq = x.float().pow(2).sum(-1, keepdim=True)
    mean = comm.all_reduce(sq) / full
    h = x.float() * torch.rsqrt(mean + norm.variance_epsilon)
    return norm._scale(h, x.dtype)


class DecoderModel(nn.Module):
    """Embedding, the layer stack and the final norm over a packed batch."""

    def __init__(
        self,
        cfg: ArchConfig,
        layers: Iterable[nn.Module],
        ropes: dict[str, RotaryEmbedding],
        part: TPPartition,
        comm: BaseComm,
        norm_cls: type[RMSNorm],
        embed_scale: float | None,
    ) -> None:
        super().__init__()
        self.embed_tokens = vocab_embedding(
            cfg.vocab_size, part.vocab_start, part.vocab_shard, cfg.hidden_size, comm
        )
        self.embed_scale = embed_scale
        # One rope per kind of layer (Gemma 3: its own for the sliding layers); a NoPE layer
        # (SmolLM3's) turns q and k by nothing: cos 1, sin 0.
        self.rotary = ropes["full_attention"]
        self.local_rotary = ropes.get(SLIDING_ATTENTION)
        types = cfg.layer_types or ("full_attention",) * cfg.num_hidden_layers
        self.layer_ropes = [
            "none" if not cfg.rotates(i)
            else "local" if t == SLIDING_ATTENTION and self.local_rotary is not None
            else "global"
            for i, t in enumerate(types)
        ]  # fmt: skip
        self.has_nope_layers = "none" in self.layer_ropes
        self.layers = nn.ModuleList(layers)
        self.norm = norm_cls(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """Return final hidden states (T, hidden_size) for the packed batch."""
        x = self.embed_tokens(fb.input_ids)
        if self.embed_scale is not None:  # in the model dtype, as transformers rounds it
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
        ropes = {"global": self.rotary(fb.positions)}
        if self.local_rotary is not None:
            ropes["local"] = self.local_rotary(fb.positions)
        if self.has_nope_layers:
            cos, _ = ropes["global"]  # (T, rotary_dim) float32
            ropes["none"] = (torch.ones_like(cos), torch.zeros_like(cos))
        residual = None
        for layer, rope in zip(self.layers, self.layer_ropes):
            x, residual = layer(ropes[rope], x, residual, fb)
        x, _ = self.norm(x, residual)
        return x


class CausalLM(nn.Module):
    """Decoder + LM head. `forward` returns logits only for `fb.logits_indices`.

    `max_position`: the positions served (the context length; default the checkpoint's
    max_position_embeddings). With a communicator of several ranks this module is one rank's
    shard (`partition`), and every rank returns the same gathered logits. Subclasses define
    `make_layer` and may override `norm_cls`, `embed_scale`, `make_ropes` and `final_logits`.
    """

    norm_cls: type[RMSNorm] = RMSNorm
    # (checkpoint name part, this module's): where a family's checkpoint names a module
    # differently from the shared layers (Mixtral's block_sparse_moe is `mlp` here).
    checkpoint_aliases: tuple[tuple[str, str], ...] = ()

    def __init__(
        self, cfg: ArchConfig, max_position: int | None = None, comm: BaseComm | None = None
    ) -> None:
        super().__init__()
        comm = comm or NullComm()
        self.config = cfg
        self.partition = TPPartition.of(cfg, comm.world_size, comm.rank)
        part = self.partition
        served = max_position or cfg.max_position_embeddings
        layers = (self.make_layer(cfg, i, part, comm) for i in range(cfg.num_hidden_layers))
        self.model = DecoderModel(cfg, layers, self.make_ropes(cfg, served), part, comm,
                                  self.norm_cls, self.embed_scale(cfg))  # fmt: skip
        self.lm_head = lm_head(cfg.vocab_size, part.vocab_shard, cfg.hidden_size, comm)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        raise NotImplementedError

    def embed_scale(self, cfg: ArchConfig) -> float | None:
        """What the embedding is multiplied by (None: nothing)."""
        return None

    def make_ropes(self, cfg: ArchConfig, served: int) -> dict[str, RotaryEmbedding]:
        """Rope per layer kind: "full_attention" always, "sliding_attention" where the sliding
        layers have their own (local_rope_theta)."""
        ropes = {"full_attention": make_rope(cfg, cfg.rope_theta, cfg.rope_scaling, served)}
        if cfg.local_rope_theta:
            ropes[SLIDING_ATTENTION] = make_rope(
                cfg, cfg.local_rope_theta, cfg.local_rope_scaling, served
            )
        return ropes

    def final_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, vocab) float32 logits after the LM head -> what sampling sees."""
        return logits

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """(N, vocab_size) float32 logits for the N rows in fb.logits_indices."""
        hidden = self.model(fb)
        return self.final_logits(self.lm_head(hidden[fb.logits_indices]).float())

    def fuse_cpu_decode_layers(self) -> int:
        """After `use_cpu_kernels`: run each layer's decode steps as one C call where all of
        its parts have kernel versions; returns how many layers (cpu/fused_layer.py)."""
        from radixrt.model.cpu.fused_layer import fuse_decode_layers

        return fuse_decode_layers(self.model.layers)

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Copy this rank's part of each checkpoint tensor (a torch.Tensor or a safetensors
        slice) into its parameter by name; raise on missing or misshapen ones."""
        if self.config.tie_word_embeddings:  # moving off "meta" may have untied them
            self.lm_head.weight = self.model.embed_tokens.weight
        if self.checkpoint_aliases:
            weights = ((self._alias(name), t) for name, t in weights)
        load_model_weights(self, weights)
        if self.config.rope_interleaved:
            for module in self.modules():
                if isinstance(module, SelfAttention):
                    module.pair_rope_halves()

    def _alias(self, name: str) -> str:
        for theirs, ours in self.checkpoint_aliases:
            name = name.replace(theirs, ours)
        return name


def make_rope(
    cfg: ArchConfig, theta: float, scaling: dict[str, Any] | None, served: int
) -> RotaryEmbedding:
    """A rope of the model's rotary width covering `served` positions."""
    return RotaryEmbedding(cfg.rotary_width, served + 1, theta, scaling,
                           cfg.max_position_embeddings, served)  # fmt: skip
