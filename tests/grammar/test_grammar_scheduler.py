"""Constrained requests through the scheduler on tiny random models: the mask alone makes every
output match, also when requests are retracted, when the model's logits are wider than the
tokenizer's vocabulary, and when a compile exceeds the time limit."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from tiny_models import make_tiny

import radixrt as rt
from radixrt.grammar.base import GrammarError

WORD = r"([a-z]{3} ){12}"
IPV4 = r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"


@pytest.fixture(scope="module")
def wide_llama_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """The tiny Llama with 64 logits past the tokenizer's vocabulary."""
    return make_tiny(
        tmp_path_factory.mktemp("wide_llama"), smollm2_path, "llama", vocab_size=49152 + 64
    )


@pytest.mark.parametrize("backend", ["llguidance", "outlines"])
def test_retracted_constrained_requests_still_match(tiny_llama_path, backend) -> None:
    prompts = [f"Request number {i} says" for i in range(12)]
    with rt.Engine(str(tiny_llama_path), max_total_tokens=160, grammar_backend=backend) as e:
        outs = e.generate(
            prompts, {"regex": WORD, "temperature": 1.0, "seed": 1, "max_new_tokens": 60}
        )
        assert e.scheduler.stats.retractions > 0
        e.scheduler.kv.check_whole()
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        assert re.fullmatch(WORD, out["text"]), out["text"]


@pytest.mark.parametrize("backend", ["llguidance", "outlines"])
def test_logits_wider_than_the_vocabulary(wide_llama_path, backend) -> None:
    with rt.Engine(str(wide_llama_path), max_total_tokens=1024, grammar_backend=backend) as e:
        assert e.scheduler.sampler.vocab_size == 49152 + 64
        outs = e.generate(
            ["a", "b", "c"], [{"regex": IPV4, "temperature": t, "seed": 2} for t in (0.0, 1.0, 1.0)]
        )
        plain = e.generate(["a"], {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True})
        e.scheduler.kv.check_whole()
    for out in outs:
        assert re.fullmatch(IPV4, out["text"]) and max(out["output_ids"]) < 49152, out
    assert len(plain[0]["output_ids"]) == 4


def test_a_compile_over_the_time_limit_is_refused(tiny_llama_path) -> None:
    # outlines walks the whole vocabulary per DFA state: this regex takes ~1.6 s. The compile
    # thread cannot be stopped and holds the GIL in long stretches: it is waited for at the
    # end, so that it does not slow the next tests' compiles past their limit.
    with rt.Engine(
        str(tiny_llama_path),
        max_total_tokens=512,
        grammar_backend="outlines",
        grammar_timeout_s=0.2,
    ) as e:
        for _ in range(2):  # the second time from the timed-out cache, without compiling
            with pytest.raises(GrammarError, match="took longer than 0.2 s"):
                e.generate("x", {"regex": "[a-z]{1,300}"})
        # Another spec compiles on the other worker beside the one still running. That one
        # holds the GIL in long stretches, so the small compile's wall time depends on the
        # machine: its limit is raised (a 0.2 s limit failed it once on a quiet Zen 5).
        e.scheduler.grammar.compiler.timeout_s = 30.0
        out = e.generate("x", {"regex": "(yes|no)", "temperature": 0})
        assert out["text"] in ("yes", "no")
        with pytest.raises(GrammarError, match="took longer than 0.2 s"):  # still refused
            e.generate("x", {"regex": "[a-z]{1,300}"})
        e.scheduler.kv.check_whole()
    deadline = time.monotonic() + 120
    while _compile_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _compile_threads()


def _compile_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("radixrt-grammar")]
