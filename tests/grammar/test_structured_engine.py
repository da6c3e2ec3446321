"""Constrained generation on SmolLM2 through the in-process Engine: 20 schemas and 10 regexes,
greedy and at temperature 1.0, mixed with free requests in one batch; jump-forward on == off."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import radixrt as rt
from radixrt.grammar.base import GrammarError

from .structured_specs import REGEXES, SCHEMAS, check_regex, check_schema

MAX_NEW_TOKENS = 96


def _specs(temperature: float) -> list[tuple[str, dict[str, Any]]]:
    """(prompt, sampling params) of every schema and regex; seeded so runs repeat."""
    out = []
    for i, (prompt, schema) in enumerate(SCHEMAS):
        out.append(
            (
                prompt,
                {
                    "json_schema": schema,
                    "temperature": temperature,
                    "seed": i,
                    "max_new_tokens": MAX_NEW_TOKENS,
                },
            )
        )
    for i, (prompt, regex) in enumerate(REGEXES):
        out.append(
            (
                prompt,
                {
                    "regex": regex,
                    "temperature": temperature,
                    "seed": i,
                    "max_new_tokens": MAX_NEW_TOKENS,
                },
            )
        )
    return out


def _check(result: dict[str, Any], params: dict[str, Any], strip_bounds: bool = False) -> None:
    assert result["meta_info"]["finish_reason"]["type"] == "stop", result
    if "regex" in params:
        check_regex(result["text"], params["regex"])
    else:
        schema = _without_bounds(params["json_schema"]) if strip_bounds else params["json_schema"]
        check_schema(result["text"], schema)


def _without_bounds(schema: Any) -> Any:
    """The schema without numeric bounds (which the outlines backend does not enforce)."""
    if isinstance(schema, list):
        return [_without_bounds(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    drop = ("minimum", "maximum") if schema.get("type") in ("integer", "number") else ()
    return {k: _without_bounds(v) for k, v in schema.items() if k not in drop}


def _wait_whole(engine: Any) -> None:
    assert engine.scheduler.is_idle
    engine.scheduler.kv.check_whole()


@pytest.fixture(scope="module")
def engine(smollm2_path: Path) -> Iterator[Any]:
    with rt.Engine(str(smollm2_path), max_total_tokens=8192) as e:
        yield e
        _wait_whole(e)


def test_every_spec_greedy_and_sampled_in_one_mixed_batch(engine) -> None:
    specs = _specs(0.0) + _specs(1.0)
    free = [("Once upon a time", {"temperature": 0.0, "max_new_tokens": 12})] * 2 + [
        ("The weather today", {"temperature": 1.0, "seed": 3, "max_new_tokens": 12})
    ]
    batch = specs[:30] + free + specs[30:]
    results = engine.generate([p for p, _ in batch], [copy.deepcopy(s) for _, s in batch])
    for result, (_, params) in zip(results, batch, strict=True):
        if "regex" in params or "json_schema" in params:
            _check(result, params)
        else:
            assert len(result["output_ids"]) == 12  # free requests are not masked
    assert engine.scheduler.grammar.stats.forced_tokens > 0
    _wait_whole(engine)


def test_jump_forward_gives_the_same_greedy_tokens(smollm2_path, engine) -> None:
    specs = _specs(0.0)
    prompts, params = [p for p, _ in specs], [s for _, s in specs]
    on = engine.generate(prompts, copy.deepcopy(params))
    with rt.Engine(str(smollm2_path), max_total_tokens=8192, disable_jump_forward=True) as off:
        plain = off.generate(prompts, copy.deepcopy(params))
        assert off.scheduler.grammar.stats.forced_tokens == 0
        _wait_whole(off)
    assert [r["output_ids"] for r in on] == [r["output_ids"] for r in plain]
    _wait_whole(engine)


INT = r"[-+]?[0-9]+"
# (sentence start, regex, the value a reader expects)
TYPED = [
    ("The number of hours in a day is ", INT, 24),
    ("The number of days in a year is ", INT, 365),
    ("The number of days in a week is ", INT, 7),
    ("The number of minutes in an hour is ", INT, 60),
]


def _typed_params(regex: str, **extra: Any) -> dict[str, Any]:
    return {"regex": regex, "end_on_exit": True, "max_new_tokens": 16, **extra}


def test_end_on_exit_ends_a_value_where_the_models_text_would(smollm2_path, engine) -> None:
    """Without it, greedy "hours in a day" gives 2400000000000000: "." is the model's choice
    after "24", the regex refuses it, and EOS is unlikely mid-sentence."""
    prompts = [p for p, _, _ in TYPED]
    greedy = engine.generate(prompts, [_typed_params(r, temperature=0) for _, r, _ in TYPED])
    for out, (_, _, want) in zip(greedy, TYPED, strict=True):
        assert int(out["text"]) == want, out["text"]
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    sampled = engine.generate(
        prompts * 4,
        [_typed_params(r, temperature=1.0, seed=i) for i in range(4) for _, r, _ in TYPED],
    )
    for out in sampled:
        assert re.fullmatch(INT, out["text"]) and len(out["output_ids"]) < 16, out["text"]
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    with rt.Engine(str(smollm2_path), max_total_tokens=8192, disable_jump_forward=True) as off:
        plain = off.generate(prompts, [_typed_params(r, temperature=0) for _, r, _ in TYPED])
        _wait_whole(off)
    assert [r["output_ids"] for r in plain] == [r["output_ids"] for r in greedy]
    _wait_whole(engine)


def test_running_out_of_tokens_finishes_with_length(engine) -> None:
    """Without a length bound (`multipleOf` keeps the schema on llguidance; a bounded one
    refuses a budget below its minimum instead: test_structured_budget.py)."""
    prompt, schema = SCHEMAS[0]
    schema = copy.deepcopy(schema)
    schema["properties"]["age"]["multipleOf"] = 1
    out = engine.generate(prompt, {"json_schema": schema, "temperature": 0, "max_new_tokens": 4})
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert len(out["output_ids"]) == 4
    _wait_whole(engine)


def test_bad_specs_raise_before_queueing_and_the_engine_keeps_serving(engine) -> None:
    for params in (
        {"regex": "a(b"},
        {"json_schema": {"type": "no-such-type"}},
        {"ebnf": "start: ("},
        {"grammar": "x"},
    ):
        with pytest.raises(ValueError):
            engine.generate("Hi", params)
    with pytest.raises(GrammarError, match="invalid regex"):
        engine.generate("Hi", {"regex": "a(b"})
    out = engine.generate("My pet is a ", {"regex": "(cat|dog)", "temperature": 0})
    assert out["text"] in ("cat", "dog")
    _wait_whole(engine)


def test_outlines_backend(smollm2_path) -> None:
    specs = _specs(0.0)[10:]  # 10 schemas and every regex: outlines compiles take ~0.5 s each
    with rt.Engine(str(smollm2_path), max_total_tokens=8192, grammar_backend="outlines") as e:
        results = e.generate([p for p, _ in specs], [copy.deepcopy(s) for _, s in specs])
        _wait_whole(e)
    for result, (_, params) in zip(results, specs, strict=True):
        _check(result, params, strip_bounds=True)
