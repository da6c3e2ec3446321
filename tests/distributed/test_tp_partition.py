"""How heads, MLP rows and vocabulary rows divide among ranks, and the checkpoint slicing."""

from __future__ import annotations

import pytest
import torch

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.llama import LlamaForCausalLM
from radixrt.model.families.loader import load_hf_config, load_weight_slices, load_weights
from radixrt.model.families.tp_partition import TPPartition, check_tp_size, valid_tp_sizes
from radixrt.model.parallel.comm import NullComm


def arch(heads: int, kv_heads: int, inter: int = 64, vocab: int = 101) -> ArchConfig:
    return ArchConfig.from_hf(
        {
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 8 * heads,
            "intermediate_size": inter,
            "num_hidden_layers": 1,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
        }
    )


class RankComm(NullComm):
    """A rank's identity without collectives: enough to build and load one shard."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size


def test_smollm2_heads_allow_tp_1_and_3_only() -> None:
    smollm2 = arch(9, 3, inter=1536, vocab=49152)
    assert valid_tp_sizes(smollm2) == [1, 3]
    with pytest.raises(ValueError) as e:
        check_tp_size(smollm2, 2)
    msg = str(e.value)
    assert "num_attention_heads=9" in msg and "num_key_value_heads=3" in msg
    assert "valid --tp values: 1, 3" in msg


def test_kv_heads_are_split_or_replicated_with_their_query_heads() -> None:
    split = [TPPartition.of(arch(8, 4), 2, r) for r in range(2)]
    assert [(p.head_start, p.num_heads, p.kv_head_start, p.num_kv_heads) for p in split] == [
        (0, 4, 0, 2),
        (4, 4, 2, 2),
    ]
    replicated = [TPPartition.of(arch(8, 2), 4, r) for r in range(4)]
    assert [p.kv_head_start for p in replicated] == [0, 0, 1, 1]
    for p in replicated:  # query heads [head_start, +2) use KV head head_start // 4
        assert p.num_kv_heads == 1 and p.head_start // 4 == p.kv_head_start
    vocab = [TPPartition.of(arch(4, 2, vocab=101), 2, r) for r in range(2)]
    assert [(p.vocab_start, p.vocab_shard) for p in vocab] == [(0, 51), (51, 51)]


def test_shards_concatenate_to_the_checkpoint(tiny_llama_path) -> None:
    full = dict(load_weights(tiny_llama_path))
    cfg = ArchConfig.from_hf(load_hf_config(tiny_llama_path))
    shards = []
    for rank in range(2):
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg, comm=RankComm(rank, 2))
        model = model.to_empty(device="cpu")
        model.load_weights(load_weight_slices(tiny_llama_path))
        shards.append(dict(model.named_parameters()))
    d, h, hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    layer = "model.layers.1."
    q = torch.cat([s[layer + "self_attn.qkv_proj.weight"][: h // 2 * d] for s in shards])
    assert torch.equal(q, full[layer + "self_attn.q_proj.weight"])
    k = torch.cat(
        [
            s[layer + "self_attn.qkv_proj.weight"][h // 2 * d : (h // 2 + hkv // 2) * d]
            for s in shards
        ]
    )
    assert torch.equal(k, full[layer + "self_attn.k_proj.weight"])
    o = torch.cat([s[layer + "self_attn.o_proj.weight"] for s in shards], dim=1)
    assert torch.equal(o, full[layer + "self_attn.o_proj.weight"])
    down = torch.cat([s[layer + "mlp.down_proj.weight"] for s in shards], dim=1)
    assert torch.equal(down, full[layer + "mlp.down_proj.weight"])
    emb = torch.cat([s["model.embed_tokens.weight"] for s in shards])
    assert torch.equal(emb[: cfg.vocab_size], full["model.embed_tokens.weight"])
    assert torch.equal(shards[0]["model.norm.weight"], full["model.norm.weight"])
