"""Gemma 3 (text): Gemma 2's layer with per-head q/k norms and no attention soft cap; the
sliding layers (5 of every 6 by default) rotate with a rope of their own (local base:
ArchConfig.local_rope_theta)."""

from __future__ import annotations

from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.gemma2 import Gemma2ForCausalLM, gemma_layer
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.parallel.comm import BaseComm


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return gemma_layer(cfg, i, part, comm, qk_norm="head")
