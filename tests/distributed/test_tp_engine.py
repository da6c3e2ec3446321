"""Engine(tp_size=2) against tp_size=1 on tiny random Llamas, and two "nodes" on one host."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pool_checks import assert_pool_whole
from tiny_models import make_tiny

from radixrt.serve.engine import Engine

PROMPTS = [[1, 450, 7483, 310, 3444, 338], [1, 9038, 2501, 263, 931, 727, 471, 263, 2319]]
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


MODELS = {  # id -> (kind, overrides)
    "llama-4-kv-heads": ("llama", {"num_key_value_heads": 4}),  # KV heads split 2 + 2
    "llama-1-kv-head": ("llama", {"num_key_value_heads": 1}),  # one KV head copied to both
    # q/k/v biases, tied embeddings, and a vocabulary that leaves a padding row on rank 1
    "qwen2-odd-vocab": ("qwen2", {"tie_word_embeddings": True, "vocab_size": 49153}),
}


@pytest.fixture(scope="module", params=list(MODELS))
def tiny_path(request, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """Tiny random models with 4 query heads."""
    kind, overrides = MODELS[request.param]
    return make_tiny(tmp_path_factory.mktemp(request.param), smollm2_path, kind, **overrides)


def generate_twice(engine: Engine) -> tuple[list[list[int]], list[dict]]:
    first = engine.generate(input_ids=PROMPTS, sampling_params=GREEDY)
    second = engine.generate(input_ids=PROMPTS, sampling_params=GREEDY)
    assert [o["output_ids"] for o in second] == [o["output_ids"] for o in first]
    return [o["output_ids"] for o in first], [o["meta_info"] for o in second]


def test_tp2_greedy_equals_tp1_and_the_radix_cache_hits(tiny_path: Path) -> None:
    with Engine(str(tiny_path), max_total_tokens=1024) as engine:
        want, _ = generate_twice(engine)
    with Engine(str(tiny_path), tp_size=2, max_total_tokens=1024) as engine:
        got, meta = generate_twice(engine)
        assert engine.scheduler.runner.token_to_kv_pool.num_kv_heads == max(
            engine.scheduler.runner.arch.num_key_value_heads // 2, 1
        )
        assert_pool_whole(engine)
    assert got == want
    assert all(m["cached_tokens"] == len(p) - 1 for m, p in zip(meta, PROMPTS))


def start_node1(model_path: Path) -> tuple[subprocess.Popen, str]:
    """`launch_server --node-rank 1` (rank 1, no HTTP) and the address node 0 must serve."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    flags = ["--tp", "2", "--nnodes", "2", "--dist-init-addr", addr, "--max-total-tokens", "1024"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "radixrt.launch_server",
            "--model-path",
            str(model_path),
            "--node-rank",
            "1",
            *flags,
        ]
    ), addr


def test_two_nodes_on_one_host(tiny_llama_path: Path, monkeypatch) -> None:
    """Node 1 is `launch_server --node-rank 1` (its rank, no HTTP); node 0 an Engine."""
    monkeypatch.setenv("RADIXRT_DIST_SECRET", "two-nodes-test-secret")  # node 1 inherits it
    node1, addr = start_node1(tiny_llama_path)
    try:
        with Engine(str(tiny_llama_path), max_total_tokens=1024) as engine:
            want = engine.generate(input_ids=PROMPTS, sampling_params=GREEDY)
        with Engine(
            str(tiny_llama_path),
            tp_size=2,
            nnodes=2,
            node_rank=0,
            dist_init_addr=addr,
            max_total_tokens=1024,
        ) as engine:
            got = engine.generate(input_ids=PROMPTS, sampling_params=GREEDY)
            assert_pool_whole(engine)
        assert [o["output_ids"] for o in got] == [o["output_ids"] for o in want]
        assert node1.wait(30) == 0  # rank 0 sent stop; node 1 ends by itself
    finally:
        node1.kill()
        node1.wait()


def test_a_rank_lost_on_another_node_reaches_rank_0(tiny_llama_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RADIXRT_DIST_SECRET", "lost-rank-test-secret")
    node1, addr = start_node1(tiny_llama_path)
    try:
        with Engine(
            str(tiny_llama_path),
            tp_size=2,
            nnodes=2,
            node_rank=0,
            dist_init_addr=addr,
            max_total_tokens=1024,
        ) as engine:
            lost = threading.Event()
            engine.scheduler.runner.tp_group.on_rank_exit = lambda reason: lost.set()
            children = Path(f"/proc/{node1.pid}/task/{node1.pid}/children").read_text().split()
            os.kill(int(children[0]), signal.SIGKILL)
            assert node1.wait(30) == 1
            assert lost.wait(10), "rank 0 did not hear of the lost rank"
    finally:
        node1.kill()
        node1.wait()
