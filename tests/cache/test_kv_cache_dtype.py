"""--kv-cache-dtype on the CPU: a bfloat16 pool sized from memory holds twice the tokens of a
float32 one in the same bytes; the disk tier writes bfloat16 blocks of half the bytes and a
restart in another KV dtype never reads them; combinations no path can read are refused at
start-up with a message naming them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from pool_checks import assert_pool_whole
from tiny_models import make_tiny

from radixrt import Engine
from radixrt.cache.kv_dtype import resolve_kv_dtype
from radixrt.core.config import CacheConfig

GREEDY = {"temperature": 0, "max_new_tokens": 6}


def test_memory_sized_pool_holds_twice_the_tokens(tiny_llama_path: Path) -> None:
    sized = {}
    for kv in ("float32", "bfloat16"):
        with Engine(str(tiny_llama_path), mem_fraction_static=0.02, kv_cache_dtype=kv) as eng:
            runner = eng.scheduler.runner
            pool = runner.token_to_kv_pool
            assert pool.k_buffer[0].dtype == getattr(torch, kv)
            sized[kv] = (runner.max_total_tokens, pool.size_bytes)
    (t32, b32), (t16, b16) = sized["float32"], sized["bfloat16"]
    assert t16 in (2 * t32, 2 * t32 + 1)
    assert abs(b16 - b32) <= b32 // t32  # the same bytes, within a slot


def test_disk_blocks_follow_the_kv_dtype(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path
) -> None:
    model = make_tiny(tmp_path_factory.mktemp("tiny_long"), smollm2_path, "llama",
                       max_position_embeddings=4096)  # fmt: skip
    rng = random.Random(3)
    doc = [rng.randrange(100, 40000) for _ in range(1088)]  # 17 blocks, written through
    kw = {"max_total_tokens": 4096, "cache_dir": str(tmp_path), "tier_block_size": 64}
    sizes = {}
    for kv in ("bfloat16", "float32"):
        earlier = set(tmp_path.rglob("*.kv"))
        with Engine(str(model), kv_cache_dtype=kv, **kw) as eng:
            first = eng.generate(input_ids=doc, sampling_params=GREEDY)
        before = set(tmp_path.rglob("*.kv"))
        written = before - earlier
        assert len(written) == 17
        with Engine(str(model), kv_cache_dtype=kv, **kw) as eng:
            again = eng.generate(input_ids=doc, sampling_params=GREEDY)
            assert again["meta_info"]["cached_tokens_by_tier"]["disk"] == 1024
            assert again["output_ids"] == first["output_ids"]  # the same K/V, read back
            assert_pool_whole(eng)
        sizes[kv] = sum(p.stat().st_size for p in written)
        if kv == "bfloat16":  # a float32 engine on the same folder reads none of them
            with Engine(str(model), kv_cache_dtype="float32", **kw) as eng:
                out = eng.generate(input_ids=doc, sampling_params=GREEDY)
                assert out["meta_info"]["cached_tokens_by_tier"]["disk"] == 0
            for p in tmp_path.rglob("*.kv"):
                if p not in before:
                    p.unlink()
    assert sizes["bfloat16"] < 0.6 * sizes["float32"]


def test_unreadable_combinations_are_refused() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_kv_dtype("auto", torch.float32, cpu, "cpu", True) == torch.float32
    assert resolve_kv_dtype("bfloat16", torch.float32, cpu, "cpu", True) == torch.bfloat16
    assert resolve_kv_dtype("bfloat16", torch.bfloat16, cuda, "flashinfer", False) == torch.bfloat16
    with pytest.raises(ValueError, match="on cuda the attention backends read KV"):
        resolve_kv_dtype("float32", torch.bfloat16, cuda, "flashinfer", False)
    with pytest.raises(ValueError, match="attention backend 'triton' reads KV"):
        resolve_kv_dtype("bfloat16", torch.float32, cpu, "triton", False)
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        CacheConfig(kv_cache_dtype="fp8")


def test_cli_and_server_sizing_follow_the_kv_dtype(smollm2_path: Path) -> None:
    from radixrt.core.messages import ReadyMsg
    from radixrt.serve.http.api.control.render import pool_sizing
    from radixrt.serve.http.args import parse_args

    assert parse_args(["--kv-cache-dtype", "bfloat16"]).cache.kv_cache_dtype == "bfloat16"
    assert parse_args([]).cache.kv_cache_dtype == "auto"
    with pytest.raises(SystemExit):
        parse_args(["--kv-cache-dtype", "fp8"])
    ready = ReadyMsg(str(smollm2_path), 1000, 0, 2048, 49152, "cpu", "float32")
    f32 = pool_sizing(ready, 1)
    bf16 = pool_sizing(ReadyMsg(*[getattr(ready, f) for f in ready.__struct_fields__][:7],
                                kv_dtype="bfloat16"), 1)  # fmt: skip
    assert (f32["kv_dtype"], bf16["kv_dtype"]) == ("fp32", "bf16")
    assert bf16["bytes_per_token"] * 2 == f32["bytes_per_token"]
