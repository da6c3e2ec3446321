"""KV sizing: the issue's Llama-3-70B figures, both units side by side, GQA, GPU fit, CLI;
sliding-window models in one pool and with the server's window pool."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from radixrt.economics.data import read_data
from radixrt.economics.kv_bytes import (
    DEFAULT_MEM_FRACTION,
    DEFAULT_WINDOW_KV_FRACTION,
    GB,
    GIB,
    WINDOW_POOL_SLACK,
    gpu_memory_bytes,
    kv_bytes_per_token,
    window_pool_slots,
)
from radixrt.economics.kv_size import KvQuery, size_kv
from radixrt.economics.kv_size_cli import main, parse_memory
from radixrt.economics.kv_size_report import format_kv_sizing
from radixrt.economics.model_facts import facts_from_preset
from radixrt.economics.pool_figures import pool_figures

LLAMA_70B = facts_from_preset("llama-3-70b")
GEMMA3 = facts_from_preset("gemma3-270m")  # 15 of 18 layers slide over 512 keys


def test_llama_70b_one_long_request_is_42_9_gb_40_gib() -> None:
    assert (LLAMA_70B.num_layers, LLAMA_70B.num_kv_heads, LLAMA_70B.head_dim) == (80, 8, 128)
    s = size_kv(LLAMA_70B, KvQuery(dtype="bf16", context_len=131072))
    assert s.bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    assert s.total_bytes == 131072 * 327_680 == 40 * GIB
    assert round(s.total_bytes / GB, 1) == 42.9
    assert "42.9 GB (40.0 GiB)" in format_kv_sizing(s)


def test_llama_70b_64_requests_of_8k_is_171_8_gb_160_gib_never_163_8() -> None:
    s = size_kv(LLAMA_70B, KvQuery(context_len=8192, batch_size=64))
    assert s.total_bytes == 160 * GIB
    text = format_kv_sizing(s)
    assert "171.8 GB (160.0 GiB)" in text
    # the common slip, bytes / 2**20 / 1000, is neither unit and never printed
    assert round(s.total_bytes / 2**20 / 1000, 1) == 163.8
    assert "163.8" not in text


def test_gqa_saving_against_multi_head_attention() -> None:
    s = size_kv(LLAMA_70B, KvQuery())
    assert s.gqa_ratio == 8.0 and s.mha_bytes_per_token == 8 * s.bytes_per_token
    assert "GQA: 8.0x smaller than MHA" in format_kv_sizing(s)
    mha = facts_from_preset("smollm2-1.7b")  # 32 heads, 32 KV heads
    assert "GQA" not in format_kv_sizing(size_kv(mha, KvQuery()))


def test_kv_dtype_defaults_to_the_weights_dtype_and_fp8_halves_bf16() -> None:
    assert size_kv(LLAMA_70B, KvQuery(dtype="fp8")).bytes_per_token == 163_840
    bf16 = size_kv(LLAMA_70B, KvQuery(dtype="bf16", kv_dtype="fp8"))
    assert bf16.bytes_per_token == kv_bytes_per_token(LLAMA_70B, "fp8") == 163_840
    assert size_kv(LLAMA_70B, KvQuery(kv_dtype="fp32")).bytes_per_token == 655_360


def test_pages_round_each_request_up() -> None:
    s = size_kv(LLAMA_70B, KvQuery(context_len=100, page_size=16))
    assert s.query.tokens_per_request == 112
    assert s.bytes_per_request == 112 * s.bytes_per_token


def test_gpu_fit_weights_then_kv_room_tokens_requests_pages() -> None:
    facts = facts_from_preset("llama-3-8b")
    memory = gpu_memory_bytes("h100")
    assert memory == 81559 * 2**20
    s = size_kv(facts, KvQuery(context_len=8192, batch_size=64, page_size=16), memory)
    fit = s.fit
    assert fit is not None
    assert fit.weight_bytes == facts.num_params * 2 == 16_060_522_496
    assert fit.kv_room_bytes == int(memory * 0.85) - fit.weight_bytes
    assert fit.num_pages == fit.kv_room_bytes // (s.bytes_per_token * 16)
    assert fit.max_tokens == fit.num_pages * 16
    assert fit.max_requests == fit.num_pages // (8192 // 16)
    text = format_kv_sizing(s, "h100")
    assert "85.5 GB (79.6 GiB)" in text  # an 'H100 80GB' reports 81,559 MiB
    assert f"{fit.max_requests:,} requests of 8,192 tokens" in text


def test_weights_that_do_not_fit_leave_no_kv_room() -> None:
    s = size_kv(LLAMA_70B, KvQuery(dtype="bf16"), gpu_memory_bytes("h200"))
    assert s.fit is not None and s.fit.kv_room_bytes < 0 and s.fit.max_tokens == 0
    assert "KV room:     none" in format_kv_sizing(s)


def test_query_validation() -> None:
    with pytest.raises(ValueError, match="dtype"):
        KvQuery(dtype="int4")
    with pytest.raises(ValueError, match="context_len"):
        KvQuery(context_len=0)
    with pytest.raises(ValueError, match="mem_fraction"):
        KvQuery(mem_fraction=1.5)


def test_defaults_agree_with_the_runtime() -> None:
    import torch

    from radixrt.cache.memory_pool import TokenToKVPool
    from radixrt.core.config import CacheConfig
    from radixrt.executor.kv_memory import (
        CUDA_MEM_FRACTION,
        WINDOW_KV_FRACTION,
    )
    from radixrt.executor.kv_memory import (
        WINDOW_POOL_SLACK as SERVER_SLACK,
    )

    assert DEFAULT_MEM_FRACTION == CUDA_MEM_FRACTION
    assert DEFAULT_WINDOW_KV_FRACTION == WINDOW_KV_FRACTION and WINDOW_POOL_SLACK == SERVER_SLACK
    assert KvQuery().page_size == CacheConfig().page_size
    f = facts_from_preset("smollm2-135m")
    for dtype, torch_dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        runtime = TokenToKVPool.bytes_per_token(
            f.num_layers, f.num_kv_heads, f.head_dim, torch_dtype
        )
        assert kv_bytes_per_token(f, dtype) == runtime


def test_parse_memory_units() -> None:
    assert parse_memory("80") == parse_memory("80GB") == 80 * GB
    assert parse_memory("80 GiB") == 80 * GIB
    with pytest.raises(Exception, match="80GiB"):
        parse_memory("eighty")


def test_cli_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--preset", "llama-3-70b", "--context", "131072"]) == 0
    assert "42.9 GB (40.0 GiB)" in capsys.readouterr().out
    argv = ["--preset", "llama-3-70b", "--batch", "64", "--gpu", "h200", "--dtype", "fp8", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_total"]["gib"] == 80.0 and out["gqa_ratio"] == 8.0
    assert out["gpu"]["name"] == "h200" and out["gpu"]["max_requests"] > 0
    assert out["gpu"]["mem_fraction_static"] == 0.85


def test_cli_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama-3-70b", "--context", "0"])
    assert e.value.code == 2 and "context_len" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--preset", "llama-3-70b", "--gpu", "h100", "--gpu-memory", "80"])


def test_the_package_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import radixrt.economics.kv_size_cli, radixrt.economics.cost_cli\n"
        "from radixrt.economics.kv_size_cli import main\n"
        "main(['--preset', 'qwen2-7b', '--gpu', 'l40s'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_cli_defaults_are_the_dataclass_defaults() -> None:
    from radixrt.economics.cost_cli import build_parser as cost_parser
    from radixrt.economics.kv_size_cli import build_parser
    from radixrt.economics.workload import Scenario

    args, q = build_parser().parse_args(["--preset", "llama-3-8b"]), KvQuery()
    assert (args.dtype, args.kv_dtype, args.context, args.batch, args.page_size) == (
        q.dtype,
        q.kv_dtype,
        q.context_len,
        q.batch_size,
        q.page_size,
    )
    assert args.mem_fraction_static == q.mem_fraction
    assert args.window_kv_fraction == q.window_kv_fraction
    cost, s = cost_parser().parse_args([]), Scenario()
    for flag, field in (
        ("requests_per_day", "requests_per_day"),
        ("days", "days"),
        ("shared_prefix_tokens", "shared_prefix_tokens"),
        ("unique_tokens", "unique_tokens"),
        ("output_tokens", "output_tokens"),
        ("arrival", "arrival"),
        ("prefixes", "prefixes"),
        ("burst_hours", "burst_hours"),
        ("openai_retention", "openai_retention"),
        ("gemini_cache_ttl", "gemini_cache_ttl_s"),
        ("seed", "seed"),
    ):
        assert getattr(cost, flag) == getattr(s, field), flag


def test_console_script_runs_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from radixrt.cli import main as cli_main

    with pytest.raises(SystemExit) as e:
        cli_main(["kv-size", "--preset", "llama-3-8b"])
    assert e.value.code == 0 and "GQA: 4.0x smaller than MHA" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli_main(["cost", "--help"])
    assert e.value.code == 0 and "--request-log" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli_main(["--help"])
    out = capsys.readouterr().out
    assert "kv-size" in out and "cost" in out


def test_a_window_model_per_request_in_one_pool_and_with_the_window_pool() -> None:
    s = size_kv(GEMMA3, KvQuery(dtype="fp32", context_len=8192))
    per_layer = 2 * 1 * 256 * 4
    assert s.bytes_per_token == 18 * per_layer
    assert s.bytes_per_request == 8192 * 18 * per_layer  # every layer, every token
    assert s.window_bytes_per_request == per_layer * (3 * 8192 + 15 * 512)
    short = size_kv(GEMMA3, KvQuery(context_len=300))  # shorter than the window
    assert short.window_bytes_per_request == short.bytes_per_request
    text = format_kv_sizing(s)
    assert "15 of 18 layers see the last 512 tokens" in text
    assert "302.0 MB (288.0 MiB) in one pool; 66.1 MB (63.0 MiB) with a window pool" in text


def test_gemma3_270m_8k_requests_on_8gb_in_one_pool_and_with_the_window_pool() -> None:
    """The figures docs/sizing-and-cost.md quotes, and the arithmetic behind them."""
    for dtype, one_pool, window_pool in (("fp32", 18, 32), ("bf16", 41, 71)):
        s = size_kv(GEMMA3, KvQuery(dtype=dtype, context_len=8192), 8 * GB)
        fit = s.fit
        assert fit is not None and fit.window is not None
        assert (fit.max_requests, fit.window.max_requests) == (one_pool, window_pool), dtype
        per_layer = 2 * 256 * (4 if dtype == "fp32" else 2)
        full = int(fit.kv_room_bytes // (per_layer * (3 + 0.5 * 15)))
        window = max(int(full * 0.5), 512 + min(2048, full // 8))
        assert (fit.window.full_slots, fit.window.window_slots) == (full, window)
        assert fit.window.max_requests == min(full // 8192, window // 512)
        text = format_kv_sizing(s)
        assert f"fits:        {one_pool} requests of 8,192 tokens in one pool" in text
        assert f"fits:        {window_pool} requests of 8,192 tokens with the window pool" in text
    out = size_kv(GEMMA3, KvQuery(context_len=8192), 8 * GB).to_dict()
    assert out["windows"]["num_window_layers"] == 15  # type: ignore[index]
    assert out["gpu"]["window_pool"]["max_requests"] == 71  # type: ignore[index]
    assert out["gpu"]["window_pool"]["window_kv_fraction"] == 0.5  # type: ignore[index]


def test_one_pool_where_the_server_cannot_split() -> None:
    paged = size_kv(GEMMA3, KvQuery(context_len=8192, page_size=16), 8 * GB)
    assert paged.fit is not None and paged.fit.window is None
    assert "window pool: none (pages of 16)" in format_kv_sizing(paged)
    assert paged.to_dict()["gpu"]["window_pool"] is None  # type: ignore[index]
    whole = size_kv(GEMMA3, KvQuery(context_len=8192, window_kv_fraction=1.0), 8 * GB)
    assert whole.fit is not None and whole.fit.window is None
    # W = 512 + F // 8 >= F below about 585 slots: too little room to split
    room = 580 * 2 * 256 * 4 * 10.5
    assert window_pool_slots(GEMMA3, "fp32", int(room), 0.5) is None
    assert window_pool_slots(GEMMA3, "fp32", int(room * 2), 0.5) == (1160, 512 + 145)
    memory = int((GEMMA3.num_params * 4 + 10**7) / 0.85)  # 10 MB of room: 465 slots
    tight = size_kv(GEMMA3, KvQuery(dtype="fp32", context_len=64), memory)
    assert tight.fit is not None and tight.fit.window is None
    assert "too little room to split" in format_kv_sizing(tight)


def test_models_without_windows_print_what_they_always_printed() -> None:
    q = KvQuery(dtype="fp8", context_len=8192, batch_size=64, page_size=16)
    s = size_kv(LLAMA_70B, q, gpu_memory_bytes("h200"))
    text, out = format_kv_sizing(s), s.to_dict()
    assert "fits:        42 requests of 8,192 tokens (not enough for --batch 64)" in text
    assert "in total:    64 x 8,192 tokens: 85.9 GB (80.0 GiB)\n" in text
    assert "window" not in text and "one pool" not in text
    assert "windows" not in out and "window_pool" not in out["gpu"]  # type: ignore[operator]


def test_the_window_split_is_the_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_kv_memory lays out the full and window slots window_pool_slots computes, in the
    bytes pool_figures computes (to the padding rows), for budgets with and without slack."""
    import torch

    import radixrt.executor.kv_memory as kv_memory
    from radixrt.core.config import CacheConfig
    from radixrt.model.families.arch import ArchConfig
    from radixrt.model.parallel.comm import NullComm

    arch = ArchConfig.from_hf(read_data("presets/gemma3-270m.json")["config"])
    per_token = kv_bytes_per_token(GEMMA3, "fp32")
    for budget in (20 * 10**6, 60 * 10**6, 11 * 10**6):
        monkeypatch.setattr(kv_memory, "kv_budget_bytes", lambda *a, b=budget: b)
        mem = kv_memory.build_kv_memory(arch, 1, torch.float32, torch.device("cpu"),
                                        CacheConfig(), 0, NullComm(), 4, 8192, True)  # fmt: skip
        window = mem.allocator.window.capacity
        split = window_pool_slots(GEMMA3, "fp32", budget, DEFAULT_WINDOW_KV_FRACTION)
        if split is None:  # the server keeps one pool
            assert window == 0, budget
            continue
        assert (mem.capacity, window) == split, budget
        pool = mem.token_to_kv_pool
        figures = pool_figures(GEMMA3, "float32", mem.capacity, pool.size_bytes, 8192, 1, window,
                               len(pool.window_layers))  # fmt: skip
        computed, measured = figures["pool_bytes_computed"], figures["pool_bytes_measured"]
        assert computed <= measured <= computed + per_token, figures


def test_pool_figures_with_a_window_pool() -> None:
    per_layer = 2 * 256 * 2
    one = pool_figures(GEMMA3, "bfloat16", 100_000, 0, 8192)
    assert one["window_pool_tokens"] == 0 and "one_pool" not in one
    assert one["requests_of_full_context"] == 12
    two = pool_figures(GEMMA3, "bfloat16", 100_000, 0, 8192, 1, 50_000, 15)
    computed = per_layer * (3 * 100_000 + 15 * 50_000)
    assert two["pool_bytes_computed"] == computed and two["num_window_layers"] == 15
    assert two["requests_of_full_context"] == min(100_000 // 8192, 50_000 // 512) == 12
    assert two["one_pool"] == {
        "pool_tokens": computed // (18 * per_layer),
        "pool_bytes": computed // (18 * per_layer) * 18 * per_layer,
        "requests_of_full_context": computed // (18 * per_layer) // 8192,
    }
    assert two["one_pool"]["requests_of_full_context"] == 7
