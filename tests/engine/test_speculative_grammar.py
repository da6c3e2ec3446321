"""Speculative decoding of constrained requests on the default model: drafts cut to what the
grammar allows and verified under each position's mask, so greedy output is identical with
and without speculation (regex, JSON schema, EBNF; logprobs on; a cut budget), drafts are
accepted where the answer repeats a cached one, and the pool is whole after every test."""

from __future__ import annotations

import json

import pytest
from conftest import assert_pool_whole

from radixrt import Engine
from radixrt.scheduler.speculative.rows import forced_rows

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "country": {"type": "string", "maxLength": 16},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["city", "country", "population_millions"],
    "additionalProperties": False,
}
EBNF = 'start: "The answer is " ("yes" | "no") ". Because " /[a-z ]+/ "."'


@pytest.fixture(scope="module")
def engines(smollm2_path):
    # One grammar backend for both: the auto backend gives a json_schema request the regex
    # automata or, while they compile past a share of the time limit, llguidance's compile,
    # and the two allow different whitespace (`{ "a"` against `{"a"`), so under load the two
    # engines could be asked different languages. This module tests speculation, not that.
    kw = {"max_total_tokens": 4096, "grammar_backend": "llguidance"}
    with (
        Engine(str(smollm2_path), **kw) as plain,
        Engine(str(smollm2_path), speculative_num_draft_tokens=5, **kw) as spec,
    ):
        yield plain, spec


@pytest.fixture(autouse=True)
def _whole(engines):
    yield
    for e in engines:
        assert_pool_whole(e)


def _chat(engine, text: str) -> str:
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


@pytest.mark.parametrize(
    "constraint",
    [
        {"json_schema": json.dumps(CITY)},
        {"regex": r"(Paris|Lyon|Nice), [A-Z][a-z]+ [0-9]{1,3}( [a-z]+){2,12}\."},
        {"ebnf": EBNF},
    ],
    ids=["json_schema", "regex", "ebnf"],
)
def test_constrained_greedy_is_identical_and_drafts_are_accepted(engines, constraint) -> None:
    plain, spec = engines
    prompt = _chat(plain, "Describe Paris in JSON: its city, country and population.")
    params = {"temperature": 0, "max_new_tokens": 48, **constraint}
    ref = plain.generate(prompt, params)
    first = spec.generate(prompt, params)
    again = spec.generate(prompt, params)  # the answer is in the tree: drafts from it
    for got in (first, again):
        assert got["output_ids"] == ref["output_ids"] and got["text"] == ref["text"]
        assert got["meta_info"]["finish_reason"] == ref["meta_info"]["finish_reason"]
    assert again["meta_info"]["spec_accepted_tokens"] >= 5, again["meta_info"]
    if "json_schema" in constraint:
        json.loads(again["text"])


def test_logprobs_and_a_tight_budget(engines) -> None:
    plain, spec = engines
    prompt = _chat(plain, "Give Lyon as JSON.")
    params = {"temperature": 0, "max_new_tokens": 30, "json_schema": json.dumps(CITY)}
    spec.generate(prompt, params)
    with_lp = {**params, "return_logprob": True, "top_logprobs_num": 2}
    ref, got = plain.generate(prompt, with_lp), spec.generate(prompt, with_lp)
    assert got["output_ids"] == ref["output_ids"]
    lp_ref = [x[0] for x in ref["meta_info"]["output_token_logprobs"]]
    lp_got = [x[0] for x in got["meta_info"]["output_token_logprobs"]]
    assert len(lp_got) == len(got["output_ids"])  # every emitted token has its logprob
    assert max(abs(a - b) for a, b in zip(lp_ref, lp_got)) < 0.05
    assert got["meta_info"]["spec_accepted_tokens"] > 0
    json.loads(got["text"])  # the budget still ends the object in time


def test_sampled_constrained_output_stays_in_the_grammar(engines) -> None:
    plain, spec = engines
    prompt = _chat(plain, "Describe Paris in JSON: its city, country and population.")
    params = {"temperature": 0.8, "max_new_tokens": 48, "json_schema": json.dumps(CITY), "n": 4}
    for out in spec.generate(prompt, params):
        value = json.loads(out["text"])
        assert set(value) == set(CITY["properties"])


def _strings(**max_lengths: int) -> dict:
    """A JSON schema: an object of these string fields (each at most that long), all
    required, in this order, nothing else."""
    return {
        "type": "object",
        "properties": {k: {"type": "string", "maxLength": n} for k, n in max_lengths.items()},
        "required": list(max_lengths),
        "additionalProperties": False,
    }


INVOICE = _strings(customer=40, email=40, phone=24)


def test_values_copied_from_the_prompt_are_drafted_by_their_keys(engines) -> None:
    """Each value starts where `": "` last led into the previous value; the key-tied draft
    (the prompt's `Email:`) is verified like any other: output identical, drafts accepted."""
    plain, spec = engines
    text = ("Extract customer, email and phone as JSON.\n\nInvoice 7. Customer: Ann Berg, "
            "Lyon. Email: ann.berg@example-mail.org. Phone: +00 41 92 15 60.")  # fmt: skip
    params = {"temperature": 0, "max_new_tokens": 64, "json_schema": json.dumps(INVOICE)}
    ref = plain.generate(_chat(plain, text), params)
    got = spec.generate(_chat(spec, text), params)
    assert got["output_ids"] == ref["output_ids"] and got["text"] == ref["text"]
    # Lookup by suffix alone accepts 19 of 30 here (the value starts miss); keyed: 25 of 29.
    assert got["meta_info"]["spec_accepted_tokens"] >= 22, got["meta_info"]


EXTRACT = _strings(customer=40, address=60, email=48, tracking=20)


def test_the_step_that_computes_forced_keys_verifies_a_draft_after_them(
    engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a pick ends a value, jump-forward appends the key the grammar forces next
    (`email":`) to the output uncomputed; the next step computes it and, in the same pass,
    verifies a draft of the value after it (rows after the forced ones: rows.forced_rows).
    Output identical; the pool whole (the autouse check)."""
    plain, spec = engines
    text = ("Extract customer, address, email and tracking number as JSON.\n\nInvoice 2026-0001. "
            "Customer: Margarethe Oyelaran-Whitfield, 1 Harbour Street, Lyon 69002, France. "
            "Email: margarethe@example-mail.org. Order: 3 x Stainless steel espresso tamper. "
            "Delivery tracking 6A19384021155.")  # fmt: skip
    params = {"temperature": 0, "max_new_tokens": 120, "json_schema": json.dumps(EXTRACT)}
    speculation = spec.scheduler.speculation
    forced: list[int] = []
    accept = speculation._accept

    def spy(req, out, first, now):  # type: ignore[no-untyped-def]
        forced.append(forced_rows(req))
        return accept(req, out, first, now)

    monkeypatch.setattr(speculation, "_accept", spy)
    spec.flush_cache()  # drafts by lookup, not from a cached answer
    ref = plain.generate(_chat(plain, text), params)
    got = spec.generate(_chat(spec, text), params)
    assert got["output_ids"] == ref["output_ids"] and got["text"] == ref["text"]
    assert any(f > 0 for f in forced), forced  # a draft verified after forced tokens
    json.loads(got["text"])
