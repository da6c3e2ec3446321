"""Models with sliding-window layers keep those layers' K/V in a pool of their own, freed
behind each request's window and evicted from the radix tree before the full K/V. Under a
tight window pool (evictions, cut-back matches, retractions), output still equals
transformers, and the pools end whole."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import assert_pool_whole
from hf_reference import hf_greedy_nocache, load_hf
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
