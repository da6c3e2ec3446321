"""The miss explainer on crafted cases, through the Engine on the tiny model: an edited system
prompt, a reordered tool list, an evicted prefix, another namespace, a page boundary, hits
and prompts never seen. The tree is read, never changed: the pool is whole after each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import radixrt as rt

SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: answer briefly." for i in range(20))
TOOLS = {
    "weather": "weather(city) returns the forecast for a city.",
    "search": "search(query) returns the top web results.",
    "calc": "calc(expr) evaluates an arithmetic expression.",
}


def _whole(engine: Any) -> None:
    assert engine.scheduler.is_idle
    engine.scheduler.kv.check_whole()


@pytest.fixture
def engine(tiny_llama_path: Path) -> Iterator[Any]:
    with rt.Engine(str(tiny_llama_path), max_total_tokens=2048) as e:
        yield e
        _whole(e)


def _send(engine: Any, prompt: str, **kw: Any) -> None:
    engine.generate(prompt, {"max_new_tokens": 1, "temperature": 0}, **kw)


def _first_difference(engine: Any, a: str, b: str) -> int:
    x, y = engine.tokenizer.encode(a), engine.tokenizer.encode(b)
    return next(i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q)


def test_an_edited_system_prompt_diverges_where_it_was_edited(engine) -> None:
    _send(engine, SYSTEM + "\nUser: hello")
    edited = SYSTEM.replace("Rule 7:", "Rule 7 (new):") + "\nUser: hello"
    why = engine.explain_cache(edited)
    assert why["cause"] == "diverged"
    assert why["divergence"] == _first_difference(engine, SYSTEM + "\nUser: hello", edited)
    assert why["matched_tokens"] == why["divergence"]
    assert why["cached_next"]  # the cache's own continuation is returned (as ids)
    assert engine.explain_cache(SYSTEM + "\nUser: hello")["cause"] == "hit"
    assert engine.explain_cache(SYSTEM + "\nUser: hello, and more")["cause"] == "new_suffix"
    _whole(engine)


def test_a_reordered_tool_list_diverges_at_the_first_moved_tool(engine) -> None:
    def prompt(order: list[str]) -> str:
        return "Tools:\n" + "\n".join(TOOLS[k] for k in order) + "\nUser: what is 2+2?"

    _send(engine, prompt(["weather", "search", "calc"]))
    moved = prompt(["search", "weather", "calc"])
    why = engine.explain_cache(moved)
    assert why["cause"] == "diverged"
    assert why["divergence"] == _first_difference(
        engine, prompt(["weather", "search", "calc"]), moved
    )
    _whole(engine)


def test_an_evicted_prefix_says_evicted_and_when(tiny_llama_path) -> None:
    with rt.Engine(str(tiny_llama_path), max_total_tokens=600) as e:
        first = " ".join(f"first document line {i}." for i in range(40))
        _send(e, first)
        for k in range(6):  # other prompts push the first one out of the small pool
            _send(e, " ".join(f"filler {k} line {i}." for i in range(40)))
        why = e.explain_cache(first)
        assert why["cause"] == "evicted", why
        assert why["evicted_at"] is not None
        assert e.explain_cache("a prompt never sent at all")["cause"] == "never_seen"
        _whole(e)


def test_another_namespace_is_named_and_a_salted_prompt_hits_in_its_own(engine) -> None:
    text = SYSTEM + "\nUser: salted"
    _send(engine, text, extra_key="s1")
    assert engine.explain_cache(text, extra_key="s1")["cause"] == "hit"
    why = engine.explain_cache(text, extra_key="s2")
    assert why["cause"] == "other_namespace" and why["other_namespace_tokens"] > 100
    assert why["matched_tokens"] == 0
    _whole(engine)


def test_a_page_boundary_is_named(tiny_llama_path) -> None:
    with rt.Engine(str(tiny_llama_path), max_total_tokens=2048, page_size=16) as e:
        ids = e.tokenizer.encode(SYSTEM)[:64]
        e.generate(input_ids=ids, sampling_params={"max_new_tokens": 1})
        near = ids[:40] + [ids[40] + 1] + ids[41:]  # the page of 32..47 agrees for 8 tokens
        why = e.explain_cache(near)
        assert why["cause"] == "page_boundary", why
        assert why["matched_tokens"] == 32 and why["divergence"] == 40
        _whole(e)


def test_without_a_prefix_cache_the_cause_is_cache_off(tiny_llama_path) -> None:
    with rt.Engine(str(tiny_llama_path), max_total_tokens=1024, disable_radix_cache=True) as e:
        _send(e, SYSTEM)
        assert e.explain_cache(SYSTEM) == {
            "cause": "cache_off",
            "prompt_tokens": len(e.tokenizer.encode(SYSTEM)),
            "matched_tokens": 0,
            "divergence": None,
            "cached_next": [],
            "evicted_at": None,
            "other_namespace_tokens": 0,
        }
        _whole(e)
