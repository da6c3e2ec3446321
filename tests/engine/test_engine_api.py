"""Engine API on the default model: stop strings, seeds, n, streaming, logprobs, errors."""

from __future__ import annotations

import threading

import pytest
from conftest import assert_pool_whole

from radixrt import Engine, SamplingParams


@pytest.fixture(scope="module")
def engine(smollm2_path):
    with Engine(str(smollm2_path), max_total_tokens=4096) as e:
        yield e
        assert_pool_whole(e)


@pytest.fixture(scope="module")
def france(engine) -> str:
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )


def test_greedy_answer(engine, france) -> None:
    out = engine.generate(france, {"temperature": 0, "max_new_tokens": 16})
    assert out["text"] == "The capital of France is Paris."
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert out["meta_info"]["completion_tokens"] == len(out["output_ids"])


def test_stop_string_spanning_tokens(engine, france) -> None:
    tok = engine.tokenizer
    full = engine.generate(france, {"temperature": 0, "max_new_tokens": 16})["output_ids"]
    pieces = [tok.decode([t]) for t in full]
    assert pieces[2] == " of" and pieces[3] == " France"  # "of Fr" spans two tokens
    out = engine.generate(france, {"temperature": 0, "max_new_tokens": 16, "stop": ["of Fr"]})
    assert out["text"] == "The capital "
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "of Fr"}
    stream = list(
        engine.generate(
            france, {"temperature": 0, "max_new_tokens": 16, "stop": "of Fr"}, stream=True
        )
    )
    assert all("of" not in s["text"] for s in stream) and stream[-1]["text"] == "The capital "


def test_stop_token_ids_and_length(engine, france) -> None:
    out = engine.generate(
        france, {"temperature": 0, "max_new_tokens": 16, "stop_token_ids": [4649]}
    )  # " France"
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 4649}
    out = engine.generate(france, {"temperature": 0, "max_new_tokens": 3})
    assert out["meta_info"]["finish_reason"]["type"] == "length" and len(out["output_ids"]) == 3
    out = engine.generate(france, {"temperature": 0, "max_new_tokens": 12, "min_new_tokens": 10})
    assert len(out["output_ids"]) >= 10


def test_seeds_reproduce_and_n(engine, france) -> None:
    params = {"temperature": 1.0, "max_new_tokens": 12, "seed": 42, "ignore_eos": True}
    a = engine.generate(france, params)
    b = engine.generate([france, "unrelated prompt"], params)[0]  # a different batch
    assert a["output_ids"] == b["output_ids"]
    c = engine.generate(france, {**params, "seed": 43})
    assert c["output_ids"] != a["output_ids"]
    many = engine.generate(france, {**params, "n": 3})
    assert len(many) == 3 and many[0]["output_ids"] == a["output_ids"]
    assert len({tuple(m["output_ids"]) for m in many}) == 3


def test_streaming_is_cumulative(engine, france) -> None:
    chunks = list(engine.generate(france, {"temperature": 0, "max_new_tokens": 16}, stream=True))
    texts = [c["text"] for c in chunks]
    assert all(texts[i + 1].startswith(texts[i]) for i in range(len(texts) - 1))
    assert texts[-1] == "The capital of France is Paris."
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "stop"


def test_input_and_output_logprobs(engine) -> None:
    ids = engine.tokenizer.encode("The capital of France is Paris. The capital of Spain is")
    out = engine.generate(
        input_ids=ids,
        sampling_params={
            "temperature": 0,
            "max_new_tokens": 3,
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": 2,
        },
    )
    meta = out["meta_info"]
    inp = meta["input_token_logprobs"]
    assert len(inp) == len(ids) and inp[0][0] is None
    assert [t for _, t, _ in inp] == ids
    assert all(lp <= 0 for lp, _, _ in inp[1:])
    assert len(meta["output_token_logprobs"]) == 3
    top = meta["output_top_logprobs"][0]
    assert len(top) == 2 and top[0][1] == out["output_ids"][0]  # greedy picks the top-1
    # Scoring only (max_new_tokens=0), from a later start, reusing the cache.
    again = engine.generate(
        input_ids=ids,
        sampling_params={"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 5},
    )
    got = [lp for lp, _, _ in again["meta_info"]["input_token_logprobs"]]
    assert got == pytest.approx([lp for lp, _, _ in inp[5:]], abs=1e-4)
    assert again["output_ids"] == []


def test_prefix_cache_reports_cached_tokens(engine, france) -> None:
    engine.flush_cache()
    first = engine.generate(france, {"temperature": 0, "max_new_tokens": 8})
    second = engine.generate(france, {"temperature": 0, "max_new_tokens": 8})
    n = first["meta_info"]["prompt_tokens"]
    assert first["meta_info"]["cached_tokens"] == 0
    assert second["meta_info"]["cached_tokens"] == n - 1
    assert second["output_ids"] == first["output_ids"]
    turn2 = france + first["text"] + "<|im_end|>\n<|im_start|>user\nAnd of Spain?<|im_end|>\n"
    third = engine.generate(turn2, {"temperature": 0, "max_new_tokens": 8})
    assert third["meta_info"]["cached_tokens"] >= n + len(first["output_ids"]) - 2


def test_concurrent_callers_share_batches(engine, france) -> None:
    results: dict[int, list[int]] = {}

    def call(i: int) -> None:
        results[i] = engine.generate(france, {"temperature": 0, "max_new_tokens": 8})["output_ids"]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({tuple(v) for v in results.values()}) == 1


def test_bad_input_raises_clear_errors(engine) -> None:
    with pytest.raises(ValueError, match="temperature"):
        engine.generate("hi", {"temperature": -1})
    with pytest.raises(ValueError, match="exactly one of prompt and input_ids"):
        engine.generate()
    out = engine.generate(input_ids=[1] * 9000, sampling_params={"max_new_tokens": 1})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "context length" in out["meta_info"]["finish_reason"]["message"]
    assert engine.generate("hi", SamplingParams(max_new_tokens=1, temperature=0))["output_ids"]


def test_a_second_engine_in_the_process_is_warned_about(tiny_llama_path, caplog,
                                                         monkeypatch) -> None:  # fmt: skip
    """Two Engines in one process slow each other on the CPU (two OpenMP pools): the second
    says so when it starts; one started after the other shut down does not."""
    from radixrt.serve.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "_RUNNING", set())  # other tests' engines aside
    with Engine(str(tiny_llama_path), max_total_tokens=512), caplog.at_level("WARNING"):
        with Engine(str(tiny_llama_path), max_total_tokens=512):
            pass
    assert any("other Engine(s) already run" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with Engine(str(tiny_llama_path), max_total_tokens=512), caplog.at_level("WARNING"):
        pass
    assert not any("other Engine(s)" in r.getMessage() for r in caplog.records)


def test_a_prompt_computes_alike_cold_cached_and_in_n_copies(engine, france) -> None:
    """A prompt's first logprobs are bit for bit the same computed cold, found cached but for
    its last token, and in each of n greedy copies, and the copies' outputs the same, where
    every linear layer runs the C kernels (a GEMM row then does not depend on the call's other
    rows; torch's, which the guard may keep for prefills, do)."""
    plan = engine.scheduler.runner.cpu_kernels
    if plan is None or not (plan.uses("linear_decode") and plan.uses("linear_prefill")):
        pytest.skip("the guard keeps torch's GEMM for some linear layers on this machine")
    params = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True,
              "return_logprob": True, "top_logprobs_num": 3}  # fmt: skip
    engine.flush_cache()
    cold = engine.generate(france, params)
    again = engine.generate(france, params)
    assert again["meta_info"]["cached_tokens"] == len(engine.tokenizer(france)["input_ids"]) - 1
    engine.flush_cache()
    many = engine.generate(france, {**params, "n": 3})
    first = [o["meta_info"]["output_top_logprobs"][0] for o in (cold, again, *many)]
    assert all(f == first[0] for f in first)
    assert all(o["output_ids"] == cold["output_ids"] for o in (again, *many))
