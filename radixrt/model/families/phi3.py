"""Phi-3: the Llama layer; its checkpoint already fuses qkv_proj and gate_up_proj (split
per rank by weights.py), and its rope is usually longrope, often over part of each head."""

from __future__ import annotations

from radixrt.model.families.llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    pass
