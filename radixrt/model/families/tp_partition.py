"""How one model divides among tensor-parallel ranks: heads, MLP rows and vocabulary rows.

Rank r owns query heads [r*H/tp, (r+1)*H/tp). With Hkv >= tp it owns KV heads
[r*Hkv/tp, (r+1)*Hkv/tp); with Hkv < tp every rank owns one whole KV head, r*Hkv // tp, so
tp/Hkv ranks hold copies of each KV head (the ones their query heads attend with). Each
expert of a mixture of experts splits its intermediate dimension like the dense MLP.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixrt.model.families.arch import ArchConfig


@dataclass(frozen=True, slots=True)
class TPPartition:
    """This rank's share of every sharded dimension (start index and count)."""

    tp_size: int
    rank: int
    head_start: int
    num_heads: int
    kv_head_start: int
    num_kv_heads: int
    inter_start: int
    inter_size: int
    vocab_start: int
    vocab_shard: int  # rows per rank: ceil(vocab / tp); the last rank's tail rows are padding
    moe_inter_start: int = 0  # each expert's intermediate rows on this rank (0, 0: no experts)
    moe_inter_size: int = 0
    moe_inter_full: int = 0  # each expert's whole intermediate size

    @classmethod
    def of(cls, arch: ArchConfig, tp_size: int, rank: int) -> TPPartition:
        """This rank's share; ValueError naming the head counts and the valid tp values."""
        check_tp_size(arch, tp_size)
        h, hkv, inter = arch.num_attention_heads, arch.num_key_value_heads, arch.intermediate_size
        kv_heads = max(hkv // tp_size, 1)
        vocab_shard = -(-arch.vocab_size // tp_size)
        moe = arch.moe.intermediate_size if arch.moe is not None else 0
        return cls(
            tp_size=tp_size,
            rank=rank,
            head_start=rank * h // tp_size,
            num_heads=h // tp_size,
            kv_head_start=rank * kv_heads if hkv >= tp_size else rank * hkv // tp_size,
            num_kv_heads=kv_heads,
            inter_start=rank * inter // tp_size,
            inter_size=inter // tp_size,
            vocab_start=rank * vocab_shard,
            vocab_shard=vocab_shard,
            moe_inter_start=rank * moe // tp_size,
            moe_inter_size=moe // tp_size,
            moe_inter_full=moe,
        )


def valid_tp_sizes(arch: ArchConfig) -> list[int]:
    """Every tp for which heads, KV heads, the MLP and each expert divide into whole shares."""
    h, hkv, inter = arch.num_attention_heads, arch.num_key_value_heads, arch.intermediate_size
    moe = arch.moe.intermediate_size if arch.moe is not None else 0
    return [
        t
        for t in range(1, h + 1)
        if h % t == 0 and inter % t == 0 and moe % t == 0 and (hkv % t == 0 or t % hkv == 0)
    ]


def check_tp_size(arch: ArchConfig, tp_size: int) -> None:
    """ValueError unless `tp_size` divides the model (the message lists the valid values)."""
    valid = valid_tp_sizes(arch)
    if tp_size not in valid:
        raise ValueError(
            f"--tp {tp_size} does not divide this model: num_attention_heads="
            f"{arch.num_attention_heads}, num_key_value_heads={arch.num_key_value_heads}, "
            f"intermediate_size={arch.intermediate_size}; valid --tp values: "
            f"{', '.join(map(str, valid))}"
        )
