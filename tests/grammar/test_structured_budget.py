"""Constrained outputs that always end valid on SmolLM2: JSON schemas with unbounded strings and
regexes with a required separator at budgets from their minimum up, greedy and sampled; the
refusal of a budget below the minimum; typed floats in sentences; the language's error for a
cut output; jump-forward on == off with budget masks; budget masks off cut outputs short."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from radixrt_lang.errors import ProgramError

import radixrt as rt
from radixrt.grammar.base import GrammarSpec

CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "population": {"type": "integer"},
        "country": {"type": "string"},
        "is_capital": {"type": "boolean"},
    },
    "required": ["name", "population", "country", "is_capital"],
}
EMAIL = r"[a-z]+@[a-z]+\.(com|org)"
FLOAT = r"[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?"
# (sentence start, the value a reader of the model's free text expects)
FLOATS = [
    ("The value of pi is approximately ", 3.14159),
    ("Water boils at a temperature in degrees Celsius of ", 100.0),
    ("One half written as a decimal is ", 0.5),
]


def _whole(engine: Any) -> None:
    assert engine.scheduler.is_idle
    engine.scheduler.kv.check_whole()


@pytest.fixture(scope="module")
def engine(smollm2_path: Path) -> Iterator[Any]:
    with rt.Engine(str(smollm2_path), max_total_tokens=8192) as e:
        yield e
        _whole(e)


def _prompt(engine: Any, question: str) -> str:
    messages = [{"role": "user", "content": question}]
    return engine.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )


def _minimum(engine: Any, kind: str, text: str) -> int:
    compiler = engine.scheduler.grammar.compiler
    matcher = compiler.new_matcher(compiler.compile(GrammarSpec(kind, text)))
    assert matcher.bounds_length
    return matcher.min_tokens()


def _budgets(need: int) -> list[int]:
    return sorted({need, need + 1, need + 3, (3 * need) // 2, 2 * need})


def test_json_with_long_strings_ends_valid_at_every_budget(engine) -> None:
    """The model writes long strings here: without budget masks even 30 tokens end inside
    the object (see test_without_budget_masks_the_output_is_cut)."""
    schema = json.dumps(CITY)
    need = _minimum(engine, "json_schema", schema)
    assert 10 < need < 30
    prompt = _prompt(engine, "Give information about Tokyo as JSON.")
    params = [
        {"json_schema": schema, "max_new_tokens": b, "temperature": t, "seed": b}
        for b in _budgets(need)
        for t in (0.0, 1.0)
    ]
    for out, p in zip(engine.generate([prompt] * len(params), params), params, strict=True):
        assert out["meta_info"]["finish_reason"]["type"] == "stop", (p, out)
        assert len(out["output_ids"]) <= p["max_new_tokens"]
        jsonschema.validate(json.loads(out["text"]), CITY)
    _whole(engine)


def test_regex_with_a_separator_ends_matching_at_tight_budgets(engine) -> None:
    need = _minimum(engine, "regex", EMAIL)
    params = [
        {"regex": EMAIL, "max_new_tokens": b, "temperature": t, "seed": i}
        for b in range(need, need + 5)
        for i, t in enumerate((0.0, 1.0, 1.0))
    ]
    outs = engine.generate(["My e-mail address is "] * len(params), params)
    for out, p in zip(outs, params, strict=True):
        assert re.fullmatch(EMAIL, out["text"]), (p, out["text"])
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    _whole(engine)


def test_a_budget_below_the_minimum_is_refused_with_the_minimum(engine) -> None:
    schema = json.dumps(CITY)
    need = _minimum(engine, "json_schema", schema)
    out = engine.generate("Tokyo:", {"json_schema": schema, "max_new_tokens": need - 1})
    reason = out["meta_info"]["finish_reason"]
    assert reason["status_code"] == 400, reason
    assert f"takes {need} tokens" in reason["message"]
    assert f"max_new_tokens is {need - 1}" in reason["message"]
    ok = engine.generate("Tokyo:", {"json_schema": schema, "max_new_tokens": need})
    assert ok["meta_info"]["finish_reason"]["type"] == "stop"
    _whole(engine)


def test_typed_floats_end_where_the_sentence_goes_on(engine) -> None:
    params = {"regex": FLOAT, "end_on_exit": True, "temperature": 0, "max_new_tokens": 16}
    outs = engine.generate([p for p, _ in FLOATS], [dict(params) for _ in FLOATS])
    for out, (_, want) in zip(outs, FLOATS, strict=True):
        assert float(out["text"]) == want, out["text"]
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    sampled = [{**params, "temperature": 1.0, "seed": i} for i in range(4) for _ in FLOATS]
    outs = engine.generate([p for _ in range(4) for p, _ in FLOATS], sampled)
    for out in outs:
        assert re.fullmatch(FLOAT, out["text"]) and len(out["output_ids"]) < 16, out["text"]
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    _whole(engine)


def test_the_language_gets_valid_json_at_its_budget_and_floats(engine) -> None:
    @rt.function
    def facts(s):
        s += "The value of pi is approximately " + rt.gen("pi", dtype=float, temperature=0) + ".\n"
        s += rt.user("Give information about Tokyo as JSON.")
        s += rt.assistant(rt.gen("info", json_schema=CITY, max_tokens=24, temperature=1.0))

    s = facts.run(backend=engine, seed=3)
    assert s["pi"] == 3.14159
    jsonschema.validate(json.loads(s["info"]), CITY)
    _whole(engine)


def test_llguidance_cannot_bound_and_the_language_names_the_budget(smollm2_path) -> None:
    """llguidance's Earley parser gives no distances: the budget cuts the object, and the
    language says the budget ran out (not that the text is not JSON)."""

    @rt.function
    def info(s):
        s += "Give information about Tokyo as JSON: "
        s += rt.gen("info", json_schema=CITY, max_tokens=12, temperature=0)

    with rt.Engine(str(smollm2_path), max_total_tokens=4096, grammar_backend="llguidance") as e:
        with pytest.raises(ProgramError, match=r"ran out of tokens \(max_tokens=12\)"):
            info.run(backend=e)
        _whole(e)


def test_budget_masks_give_the_same_greedy_tokens_with_jump_forward_off(
    smollm2_path, engine
) -> None:
    schema = json.dumps(CITY)
    need = _minimum(engine, "json_schema", schema)
    prompt = _prompt(engine, "Give information about Tokyo as JSON.")
    params = [
        {"json_schema": schema, "max_new_tokens": b, "temperature": 0} for b in _budgets(need)
    ]
    params += [{"regex": EMAIL, "max_new_tokens": 6, "temperature": 0}]
    prompts = [prompt] * (len(params) - 1) + ["My e-mail address is "]
    on = engine.generate(prompts, [dict(p) for p in params])
    assert engine.scheduler.grammar.stats.forced_tokens > 0
    with rt.Engine(str(smollm2_path), max_total_tokens=8192, disable_jump_forward=True) as off:
        plain = off.generate(prompts, [dict(p) for p in params])
        assert off.scheduler.grammar.stats.forced_tokens == 0
        _whole(off)
    assert [r["output_ids"] for r in on] == [r["output_ids"] for r in plain]
    _whole(engine)


def test_without_budget_masks_the_output_is_cut(smollm2_path) -> None:
    schema = json.dumps(CITY)
    with rt.Engine(str(smollm2_path), max_total_tokens=4096, disable_grammar_budget=True) as e:
        out = e.generate(
            _prompt(e, "Give information about Tokyo as JSON."),
            {"json_schema": schema, "max_new_tokens": 30, "temperature": 0},
        )
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        with pytest.raises(ValueError):
            json.loads(out["text"])
        _whole(e)
