"""CLI flags come from the config dataclasses: same names, same defaults."""

from __future__ import annotations

import dataclasses

import pytest

from radixrt.cli import main as cli_main
from radixrt.core.config import (
    CacheConfig,
    ModelConfig,
    RouterConfig,
    SchedulerConfig,
    ServerConfig,
)
from radixrt.serve.http.args import SERVER_CONFIGS, make_parser, parse_args

ISSUE_FLAGS = [
    "--model-path",
    "--host",
    "--port",
    "--tp",
    "--mem-fraction-static",
    "--max-total-tokens",
    "--context-length",
    "--page-size",
    "--schedule-policy",
    "--disable-radix-cache",
    "--chunked-prefill-size",
    "--max-running-requests",
    "--max-queued-requests",
    "--api-key",
    "--dtype",
    "--device",
    "--attention-backend",
    "--grammar-backend",
    "--log-level",
    "--enable-metrics",
]


def test_every_cli_default_equals_the_dataclass_default() -> None:
    parser = make_parser()
    for cls in SERVER_CONFIGS:
        for f in dataclasses.fields(cls):
            assert parser.get_default(f.name) == f.default, (cls.__name__, f.name)
    assert parse_args([]) == (
        ModelConfig(),
        CacheConfig(),
        SchedulerConfig(),
        ServerConfig(),
        RouterConfig(),
    )


def test_the_issue_flags_exist_and_parse() -> None:
    options = {s for a in make_parser()._actions for s in a.option_strings}
    assert set(ISSUE_FLAGS) <= options
    args = parse_args(
        [
            "--model-path",
            "/m",
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
            "--tp",
            "1",
            "--mem-fraction-static",
            "0.5",
            "--max-total-tokens",
            "1000",
            "--context-length",
            "512",
            "--page-size",
            "4",
            "--schedule-policy",
            "fcfs",
            "--disable-radix-cache",
            "--chunked-prefill-size",
            "256",
            "--max-running-requests",
            "8",
            "--max-queued-requests",
            "3",
            "--api-key",
            "k",
            "--dtype",
            "float32",
            "--device",
            "cpu",
            "--attention-backend",
            "torch_native",
            "--grammar-backend",
            "outlines",
            "--disable-jump-forward",
            "--grammar-timeout-s",
            "2.5",
            "--log-level",
            "warning",
            "--enable-metrics",
        ]
    )
    assert args.model == ModelConfig("/m", "float32", "cpu", 512, "torch_native", 1)
    assert args.cache == CacheConfig(1000, 0.5, 4, True)
    assert args.scheduler.schedule_policy == "fcfs" and args.scheduler.max_running_requests == 8
    assert args.scheduler.chunked_prefill_size == 256
    s = args.server
    assert (s.host, s.port, s.api_key, s.max_queued_requests) == ("0.0.0.0", 8000, "k", 3)
    assert (s.log_level, s.enable_metrics) == ("warning", True)
    sc = args.scheduler
    assert (sc.grammar_backend, sc.disable_jump_forward, sc.grammar_timeout_s) == (
        "outlines",
        True,
        2.5,
    )


def test_dp_and_router_flags() -> None:
    args = parse_args(
        [
            "--dp",
            "2",
            "--router-policy",
            "round_robin",
            "--cache-threshold",
            "0.3",
            "--balance-abs-threshold",
            "4",
            "--balance-rel-threshold",
            "2",
            "--max-tree-size",
            "100",
        ]
    )
    assert args.server.dp_size == 2
    assert args.router == RouterConfig("round_robin", 0.3, 4, 2.0, 100)


@pytest.mark.parametrize(
    "argv",
    [
        ["--dp", "0"],
        ["--router-policy", "random"],
        ["--cache-threshold", "2"],
        ["--tp", "2", "--nnodes", "3"],
        ["--dtype", "int3"],
        ["--device", "tpu"],
        ["--port", "70000"],
        ["--mem-fraction-static", "1.5"],
        ["--max-total-tokens", "x"],
        ["--log-level", "loud"],
        ["--grammar-backend", "xgrammar"],
    ],
)
def test_bad_flags_exit_with_a_usage_error(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_console_script_usage(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli_main(["--help"])
    assert e.value.code == 0 and "serve" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli_main(["frobnicate"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--help"])
    assert e.value.code == 0 and "--max-queued-requests" in capsys.readouterr().out


def test_vllm_spellings_of_the_same_settings() -> None:
    args = parse_args(["/models/m", "--max-model-len", "4096", "--max-num-seqs", "32",
                       "--gpu-memory-utilization", "0.5", "--seed", "7", "--enforce-eager",
                       "--tensor-parallel-size", "1", "--enable-prefix-caching"])  # fmt: skip
    assert args.model.model_path == "/models/m" and args.model.context_length == 4096
    assert args.model.disable_cuda_graph and args.model.tp_size == 1
    assert args.scheduler.max_running_requests == 32 and args.scheduler.random_seed == 7
    assert args.cache.mem_fraction_static == 0.5 and not args.cache.disable_radix_cache
    assert parse_args(["--no-enable-prefix-caching"]).cache.disable_radix_cache
    assert parse_args(["--model", "/m"]).model.model_path == "/m"
    assert parse_args(["/m", "--model-path", "/m"]).model.model_path == "/m"
    with pytest.raises(SystemExit):
        parse_args(["/m", "--model-path", "/other"])
