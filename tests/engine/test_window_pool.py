"""Models with sliding-window layers keep those layers' K/V in a pool of their own, freed
behind each request's window and evicted from the radix tree before the full K/V. Under a
tight window pool (evictions, cut-back matches, retractions), output still equals
transformers, and the pools end whole."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hf_reference import hf_greedy_nocache, load_hf
from pool_checks import assert_pool_whole
from tiny_families import WINDOW, make_family

from radixrt import Engine

NEW = 40  # generated tokens: past the 16-key window, so requests free their own window K/V
rng = random.Random(0)
SYSTEM = [rng.randrange(3, 49000) for _ in range(40)]
PROMPTS = [SYSTEM + [rng.randrange(3, 49000) for _ in range(rng.randrange(3, 30))]
           for _ in range(10)]  # fmt: skip
PROMPTS += [PROMPTS[0][:50] + [5, 6, 7], PROMPTS[3] + [9]]
GREEDY = {"temperature": 0, "max_new_tokens": NEW, "ignore_eos": True}


@pytest.fixture(scope="module", params=["gemma3", "mistral"])
def model(request, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path):
    """gemma3: two window layers and a full one; mistral: every layer slides."""
    path = make_family(tmp_path_factory.mktemp(request.param), request.param, smollm2_path)
    hf = load_hf(path)
    return path, [hf_greedy_nocache(hf, p, NEW)[0] for p in PROMPTS]


def test_a_tight_window_pool_serves_exact_output(model) -> None:
    path, want = model
    with Engine(str(path), max_total_tokens=1200, context_length=256, chunked_prefill_size=24,
                window_kv_fraction=0.05) as engine:  # fmt: skip
        runner = engine.scheduler.runner
        window = runner.allocator.window
        assert window.window == WINDOW and window.capacity < 200
        assert min(runner.token_to_kv_pool.rows) == window.capacity + 1
        for _ in range(2):  # the second round matches what the first left in the tree
            outs = engine.generate(input_ids=PROMPTS[:7], sampling_params=GREEDY)
            outs += engine.generate(input_ids=PROMPTS[7:], sampling_params=GREEDY)
            assert [o["output_ids"] for o in outs] == want
        cached = [o["meta_info"]["cached_tokens"] for o in outs]
        assert max(cached) >= len(SYSTEM) and min(cached) < len(SYSTEM)  # some matches cut
        assert_pool_whole(engine)
        assert window.free_list.num_free < window.capacity  # the tree kept window K/V


def test_one_pool_without_the_radix_cache_and_at_fraction_one(model) -> None:
    path, want = model
    with Engine(str(path), max_total_tokens=1200, context_length=256, disable_radix_cache=True,
                window_kv_fraction=0.05) as engine:  # fmt: skip
        outs = engine.generate(input_ids=PROMPTS[:4], sampling_params=GREEDY)
        assert [o["output_ids"] for o in outs] == want[:4]
        assert_pool_whole(engine)
        assert engine.scheduler.runner.allocator.window.free_list.num_free == (
            engine.scheduler.runner.allocator.window.capacity
        )
    with Engine(str(path), max_total_tokens=1200, context_length=256,
                window_kv_fraction=1.0) as engine:  # fmt: skip
        assert engine.scheduler.runner.allocator.window.window == 0  # one pool
        outs = engine.generate(input_ids=PROMPTS[:4], sampling_params=GREEDY)
        assert [o["output_ids"] for o in outs] == want[:4]
        assert_pool_whole(engine)


def test_the_server_reports_the_window_pool(tmp_path: Path, smollm2_path: Path) -> None:
    """ReadyMsg carries the window pool; /get_server_info's kv_sizing computes its bytes (to
    the padding rows) and the requests of the full context it holds, and those of one pool of
    the same bytes; the launch line names it."""
    from radixrt.scheduler.process import ready_msg
    from radixrt.serve.http.api.control.render import pool_sizing
    from radixrt.serve.http.launch import kv_pool_text

    path = make_family(tmp_path / "gemma3", "gemma3", smollm2_path)  # layers: window, window, full
    with Engine(
        str(path), max_total_tokens=1200, context_length=256, window_kv_fraction=0.5
    ) as engine:
        ready = ready_msg(engine.scheduler.runner)
    assert ready.max_total_tokens == 1200
    assert ready.window_pool_tokens == 600 and ready.num_window_layers == 2
    sizing = pool_sizing(ready, 1)
    per_layer = 2 * 2 * 16 * 4  # K and V x 2 KV heads x head dim 16 x float32
    computed = per_layer * (1 * 1200 + 2 * 600)
    assert sizing["pool_bytes_computed"] == computed
    assert computed <= sizing["pool_bytes_measured"] <= computed + 3 * per_layer, sizing
    assert sizing["requests_of_full_context"] == min(1200 // 256, 600 // WINDOW) == 4
    assert sizing["one_pool"]["pool_tokens"] == computed // (3 * per_layer) == 800
    assert sizing["one_pool"]["requests_of_full_context"] == 3
    assert kv_pool_text(ready).startswith(
        "KV pool 1200 tokens + window pool 600 tokens for 2 sliding-window layers ("
    )
