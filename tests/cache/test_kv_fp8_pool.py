"""fp8 KV pools on the CPU (--kv-cache-dtype fp8_e4m3 / fp8_e5m2): rows of head-dim bytes and a
float32 scale per (token, KV head); sizing counts the scales (pool, server info and `radixrt
kv-size` agree), disk blocks carry them and are read back as written, a block of another
dtype is never read as this one, and GPU paths are refused at start-up by name."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest
import torch
from pool_checks import assert_pool_whole
from tiny_models import make_tiny

from radixrt import Engine
from radixrt.cache.kv_dtype import kv_dtype_name, resolve_kv_dtype
from radixrt.cache.kv_layout import from_rows, to_rows
from radixrt.cache.memory_pool import TokenToKVPool
from radixrt.core.config import CacheConfig

GREEDY = {"temperature": 0, "max_new_tokens": 6}
LOGPROBS = {**GREEDY, "max_new_tokens": 1, "return_logprob": True, "logprob_start_len": 1000}
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


@pytest.mark.parametrize("kv", sorted(FP8))
def test_pool_rows_carry_their_scales(kv: str) -> None:
    hkv, d = 3, 64
    pool = TokenToKVPool(8, 2, hkv, d, FP8[kv], "cpu")
    assert pool.k_buffer[1].shape == (9, hkv, d + 4)
    # 2 x layers x heads x (64 bytes + a 4-byte scale)
    assert pool.bytes_per_token(30, hkv, d, FP8[kv]) == 2 * 30 * hkv * 68 == 12_240
    assert pool.size_bytes == 9 * 2 * 2 * hkv * 68
    k = torch.randn(2, hkv, d) * torch.tensor([1e-3, 1.0, 1e4]).view(1, hkv, 1)
    loc = torch.tensor([3, 7])
    pool.set_kv_buffer(1, loc, k, -k)
    kb, vb = pool.get_kv_buffer(1)
    assert torch.equal(kb[loc].view(torch.uint8), to_rows(k, FP8[kv]).view(torch.uint8))
    back = from_rows(vb[loc], torch.float32)
    rel = ((back + k).abs() / k.abs().amax(-1, keepdim=True)).max().item()
    assert rel <= (2**-4 if kv == "fp8_e4m3" else 2**-3)  # half a step at the row's top
    assert from_rows(kb[:1], torch.float32).abs().sum() == 0  # the padding slot reads zeros


def test_memory_sized_pool_holds_the_narrow_tokens(tiny_llama_path: Path) -> None:
    sized = {}
    for kv in ("float32", "fp8_e4m3"):
        with Engine(str(tiny_llama_path), mem_fraction_static=0.02, kv_cache_dtype=kv) as eng:
            runner = eng.scheduler.runner
            pool = runner.token_to_kv_pool
            sized[kv] = (runner.max_total_tokens, pool.size_bytes, pool.head_dim)
            out = eng.generate(input_ids=list(range(5, 40)), sampling_params=GREEDY)
            assert len(out["output_ids"]) == 6
            assert_pool_whole(eng)
    (t32, b32, d), (t8, b8, _) = sized["float32"], sized["fp8_e4m3"]
    ratio = 4 * d / (d + 4)  # float32 bytes over fp8's per (token, head)
    assert abs(t8 / t32 - ratio) < 0.01
    assert abs(b8 - b32) <= b32 // t32  # the same bytes, within a slot


def test_disk_blocks_keep_scales_and_their_dtype(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path
) -> None:
    model = make_tiny(tmp_path_factory.mktemp("tiny_long"), smollm2_path, "llama",
                      max_position_embeddings=4096)  # fmt: skip
    rng = random.Random(3)
    doc = [rng.randrange(100, 40000) for _ in range(1088)]  # 17 blocks, written through
    kw = {"max_total_tokens": 4096, "cache_dir": str(tmp_path), "tier_block_size": 64}
    with Engine(str(model), kv_cache_dtype="fp8_e4m3", **kw) as eng:
        first = eng.generate(input_ids=doc, sampling_params=GREEDY)
        first_lp = eng.generate(input_ids=doc, sampling_params=LOGPROBS)
    written = set(tmp_path.rglob("*.kv"))
    assert len(written) == 17
    with Engine(str(model), kv_cache_dtype="fp8_e4m3", **kw) as eng:
        again = eng.generate(input_ids=doc, sampling_params=GREEDY)
        assert again["meta_info"]["cached_tokens_by_tier"]["disk"] == 1024
        assert again["output_ids"] == first["output_ids"]  # the same bytes and scales back
        lp = eng.generate(input_ids=doc, sampling_params=LOGPROBS)
        ours = [x[0] for x in lp["meta_info"]["input_token_logprobs"] if x[0] is not None]
        want = [x[0] for x in first_lp["meta_info"]["input_token_logprobs"] if x[0] is not None]
        assert len(ours) >= 80
        assert ours == pytest.approx(want, abs=1e-5)
        assert_pool_whole(eng)
    with Engine(str(model), kv_cache_dtype="fp8_e5m2", **kw) as eng:  # same bytes, other format
        out = eng.generate(input_ids=doc, sampling_params=GREEDY)
        assert out["meta_info"]["cached_tokens_by_tier"]["disk"] == 0
        assert_pool_whole(eng)
    raw = next(iter(written)).read_bytes()  # the header records the dtype and row width
    header = json.loads(raw[12 : 12 + struct.unpack_from("<I", raw, 8)[0]])
    c = json.loads((model / "config.json").read_text())
    d = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
    assert header["dtype"] == "float8_e4m3fn" and header["shape"][-1] == d + 4


def test_gpu_paths_are_refused_by_name() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for kv, dtype in FP8.items():
        assert resolve_kv_dtype(kv, torch.float32, cpu, "cpu", True) == dtype
        assert resolve_kv_dtype(kv, torch.bfloat16, cpu, "torch_native", True) == dtype
        assert kv_dtype_name(dtype) == kv
        with pytest.raises(ValueError, match=f"--kv-cache-dtype {kv}: on cuda"):
            resolve_kv_dtype(kv, torch.bfloat16, cuda, "flashinfer", False)
        with pytest.raises(ValueError, match="attention backend 'triton' reads KV"):
            resolve_kv_dtype(kv, torch.float32, cpu, "triton", False)
        assert CacheConfig(kv_cache_dtype=kv).kv_cache_dtype == kv
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        CacheConfig(kv_cache_dtype="fp8")


def test_server_info_and_cli_count_the_scales(smollm2_path: Path, capsys) -> None:
    from radixrt.core.messages import ReadyMsg
    from radixrt.economics.kv_size_cli import main as kv_size
    from radixrt.serve.http.api.control.render import pool_sizing
    from radixrt.serve.http.args import parse_args

    assert parse_args(["--kv-cache-dtype", "fp8_e5m2"]).cache.kv_cache_dtype == "fp8_e5m2"
    ready = ReadyMsg(str(smollm2_path), 1000, 0, 2048, 49152, "cpu", "float32")
    fields = [getattr(ready, f) for f in ready.__struct_fields__][:7]
    fp8 = pool_sizing(ReadyMsg(*fields, kv_dtype="float8_e4m3fn"), 1)
    assert fp8["kv_dtype"] == "fp8_e4m3"
    assert fp8["bytes_per_token"] == TokenToKVPool.bytes_per_token(30, 3, 64, torch.float8_e4m3fn)
    assert kv_size(["--preset", "smollm2-135m", "--kv-dtype", "fp8_e5m2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # 8,192 tokens (the default context)
    assert report["kv_bytes_total"]["bytes"] == 8192 * 12_240


@pytest.mark.parametrize("d", [5, 6, 64])
def test_rows_of_any_head_dim_and_layout(d: int) -> None:
    """The scale's 4 bytes follow d values whatever d's alignment; a transposed view of rows
    reads as the rows do."""
    x = torch.randn(3, 2, d)
    for dtype in FP8.values():
        rows = to_rows(x, dtype)
        back = from_rows(rows, torch.float32)
        assert torch.equal(from_rows(rows.transpose(0, 1), torch.float32).transpose(0, 1), back)
        assert ((back - x).abs() <= x.abs().amax(-1, keepdim=True) / 8).all()


def test_auto_follows_the_kernels_where_the_backend_reads_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cpu, bf16, f32 = torch.device("cpu"), torch.bfloat16, torch.float32
    assert resolve_kv_dtype("auto", f32, cpu, "cpu", True) == f32  # no kernel choice
    assert resolve_kv_dtype("auto", f32, cpu, "cpu", True, bf16) == bf16
    with caplog.at_level("INFO", logger="radixrt"):
        assert resolve_kv_dtype("auto", f32, cpu, "triton", False, bf16) == f32
    assert "not the kernels' bfloat16: attention backend 'triton'" in caplog.text
