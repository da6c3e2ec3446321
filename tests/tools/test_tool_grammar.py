"""Tool-call grammars on the real tokenizer: forced calls (length-bounded regex where outlines
enforces the schemas, llguidance otherwise), and `auto`'s free text in which an opened call
is constrained; what each accepts and refuses, token by token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from radixrt.grammar.base import GrammarSpec
from radixrt.grammar.token_automaton import TokenAutomaton
from radixrt.grammar.union import split_alternatives
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import ToolCall, ToolChoice, ToolPlan, ToolSpec
from radixrt.serve.http.tools.formats import (
    CALL_FORMATS,
    GRANITE,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    CallFormat,
)
from radixrt.serve.http.tools.grammar import auto_call_spec, forced_call_spec

ADD = ToolSpec(
    "add",
    "Add",
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["a"],
        "additionalProperties": False,
    },
)
WIDE = ToolSpec(  # a range of any size, a one-sided exclusive bound, a pattern: regexes too
    "span",
    "",
    {
        "type": "object",
        "properties": {
            "start": {"type": "integer", "minimum": 0, "maximum": 99999},
            "step": {"type": "integer", "exclusiveMinimum": -3},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[a-z&~#.-]+$"},
        },
        "required": ["start", "step", "code"],
    },
)
OPEN = ToolSpec(  # a keyword the regex cannot write: llguidance
    "rate",
    "",
    {"type": "object", "properties": {"s": {"type": "integer", "minimum": 0, "multipleOf": 5}}},
)


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> Any:
    from radixrt.grammar.auto_backend import AutoBackend
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    return tok, AutoBackend(tok, len(tok), [tok.eos_token_id])


def _accepts(backend: Any, spec: dict[str, str], text: str) -> bool:
    tok, b = backend
    ((kind, body),) = spec.items()
    m = b.new_matcher(b.compile(GrammarSpec(kind, body)))
    return all(m.accept(t) for t in tok.encode(text)) and m.is_accepting()


def test_forced_calls_take_the_bounded_path_where_they_can(backend: Any) -> None:
    _, b = backend
    for fmt in CALL_FORMATS.values():
        spec = forced_call_spec(fmt, [ADD], ToolChoice("required"))
        assert list(spec) == ["regex"]
        assert isinstance(b.compile(GrammarSpec("regex", spec["regex"])), TokenAutomaton)
        text = fmt.call_text([ToolCall("x", "add", '{"a":7}')])
        text = text.removeprefix(fmt.opener or "") if fmt.array else text
        assert _accepts(backend, spec, text), fmt.name
        assert not _accepts(backend, spec, text.replace("7", "12")), fmt.name  # out of range
    wide = forced_call_spec(HERMES, [WIDE], ToolChoice("named", name="span"))
    assert list(wide) == ["regex"]
    assert isinstance(b.compile(GrammarSpec("regex", wide["regex"])), TokenAutomaton)
    args = '{"start":%s,"step":%s,"code":"%s"}'
    call = '<tool_call>\n{"name":"span","arguments":' + args + "}\n</tool_call>"
    assert _accepts(backend, wide, call % (99999, -2, "AB-x&~#.-y"))
    assert _accepts(backend, wide, call % (0, 123456, "QQ-a"))
    assert not _accepts(backend, wide, call % (100000, 0, "AB-a"))
    assert not _accepts(backend, wide, call % (5, -3, "AB-a"))
    assert not _accepts(backend, wide, call % (5, 0, "AB-A"))
    open_spec = forced_call_spec(HERMES, [OPEN], ToolChoice("required"))
    assert list(open_spec) == ["ebnf"]
    assert _accepts(
        backend, open_spec, '<tool_call>\n{"name":"rate","arguments":{"s":5}}\n</tool_call>'
    )
    assert not _accepts(
        backend, open_spec, '<tool_call>\n{"name":"rate","arguments":{"s":7}}\n</tool_call>'
    )


def test_a_choice_too_large_for_one_regex_is_one_call_per_tool_branch(backend: Any) -> None:
    """Sixteen tools of strings up to 16 characters: a regex too big for outlines as a whole,
    so the call is a top-level choice of one call per tool, which the backend matches as the
    union of the tools' own automata (still length-bounded); one call, never a run of them."""
    string16 = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 16}}}
    tools = [ToolSpec(f"t{i}", "", string16) for i in range(16)]
    spec = forced_call_spec(HERMES, tools, ToolChoice("required", parallel=True))
    assert list(spec) == ["regex"]
    named = forced_call_spec(HERMES, tools, ToolChoice("named", name="t3"))
    assert named["regex"] in split_alternatives(spec["regex"])  # the same branch: compiled once
    one = '<tool_call>\n{"name":"t3","arguments":{"s":"ab"}}\n</tool_call>'
    assert _accepts(backend, spec, one)
    assert not _accepts(backend, spec, one + "\n" + one)
    # `auto` beside a response format: one call of a tool, or the answer, as branches.
    d = ToolPlan(HERMES, tuple(tools)).sampling_dict(backend[0], {"json_schema": ANSWER})
    assert set(d) == {"regex", "json_schema"} and len(split_alternatives(d["regex"])) == 17
    answer = {"regex": d["regex"]}
    assert _accepts(backend, answer, one) and _accepts(backend, answer, '{"city": "A", "temp": 1}')
    assert not _accepts(backend, answer, one + "\n" + one)


def test_auto_is_free_text_until_a_call_opens(backend: Any) -> None:
    spec = auto_call_spec(HERMES, [ADD], ToolChoice())
    call = '<tool_call>\n{"name":"add","arguments":{"a":3}}\n</tool_call>'
    assert _accepts(backend, spec, "Plain text, <b>tags</b> and {braces}.")
    assert _accepts(backend, spec, "Let me add. " + call + " Done.")
    assert not _accepts(
        backend, spec, 'Hi <tool_call>\n{"name":"sub","arguments":{}}\n</tool_call>'
    )
    assert not _accepts(backend, spec, 'Hi <tool_call>\n{"name":"add","arguments":{"a":30}}')
    llama = auto_call_spec(LLAMA3_JSON, [ADD], ToolChoice())
    assert _accepts(backend, llama, "No call here.")
    assert _accepts(backend, llama, '{"name":"add","parameters":{"a":1}}')
    assert not _accepts(backend, llama, '{"name":"add","parameters":{"b":1}}')
    assert auto_call_spec(MISTRAL, [ADD], ToolChoice()) == {}  # no id of its special token


@pytest.mark.parametrize("fmt", [MISTRAL, GRANITE], ids=lambda f: f.name)
def test_list_calls_are_constrained_after_the_special_token(
    smollm2_path: Path, fmt: CallFormat
) -> None:
    """A tokenizer with the format's opener (Mistral's [TOOL_CALLS], Granite's <|tool_call|>)
    as a special token: text is free, and the list of calls the token opens is constrained (a
    name not in the list, an argument out of range or a second call without parallel calls
    are refused)."""
    from radixrt.grammar.auto_backend import AutoBackend
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    opener = fmt.opener or ""
    tok.add_special_tokens({"additional_special_tokens": [opener]})
    listed = (tok, AutoBackend(tok, len(tok), [tok.eos_token_id]))
    d = ToolPlan(fmt, (ADD,), ToolChoice(parallel=False)).sampling_dict(tok, {})
    assert list(d) == ["ebnf", "skip_special_tokens"] and d["skip_special_tokens"] is False
    spec = {"ebnf": d["ebnf"]}
    call = '{"name":"add","arguments":{"a":3}}'
    assert _accepts(listed, spec, "No call: [brackets] and {braces}.")
    assert _accepts(listed, spec, f"{opener}[{call}]")
    assert _accepts(listed, spec, f"Adding.{opener}[{call}]")
    assert not _accepts(listed, spec, opener + '[{"name":"sub","arguments":{}}]')
    assert not _accepts(listed, spec, opener + '[{"name":"add","arguments":{"a":30}}]')
    assert not _accepts(listed, spec, f"{opener}[{call}, {call}]")
    assert not _accepts(listed, spec, f"{opener}Sure, {call}")
    parallel = ToolPlan(fmt, (ADD,), ToolChoice()).sampling_dict(tok, {})
    assert _accepts(listed, {"ebnf": parallel["ebnf"]}, f"{opener}[{call}, {call}]")


def _accepts_ids(backend: Any, spec: dict[str, str], ids: list[int]) -> bool:
    _, b = backend
    ((kind, body),) = spec.items()
    m = b.new_matcher(b.compile(GrammarSpec(kind, body)))
    return all(m.accept(t) for t in ids) and m.is_accepting()


def test_hermes_calls_are_written_with_its_special_tokens(smollm2_path: Path) -> None:
    """A tokenizer whose <tool_call> and </tool_call> are special tokens (as some Hermes-format
    models mark them): a forced call and an opened `auto` call are written with the two
    tokens, not spelled out of text tokens; text is free around `auto`'s calls, and what
    follows the opener is constrained."""
    from radixrt.grammar.auto_backend import AutoBackend
    from radixrt.model.families.loader import load_tokenizer
    from radixrt.serve.http.tools.plan import special_markers

    tok = load_tokenizer(smollm2_path)
    tok.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    hermes = (tok, AutoBackend(tok, len(tok), [tok.eos_token_id]))
    ids = tok.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    assert special_markers(tok, HERMES) == dict(zip(["<tool_call>", "</tool_call>"], ids))
    call = HERMES.call_text([ToolCall("x", "add", '{"a":3}')])
    written = tok.encode(call)
    assert written[0] == ids[0] and written[-1] == ids[1]
    spelled = tok.encode(call, split_special_tokens=True)
    assert ids[0] not in spelled
    bad = HERMES.call_text([ToolCall("x", "add", '{"a":30}')])

    forced = ToolPlan(HERMES, (ADD,), ToolChoice("required")).sampling_dict(tok, {})
    assert set(forced) == {"ebnf", "end_on_exit", "skip_special_tokens"}
    assert forced["skip_special_tokens"] is False
    spec = {"ebnf": forced["ebnf"]}
    assert _accepts(hermes, spec, call) and not _accepts_ids(hermes, spec, spelled)
    assert not _accepts(hermes, spec, bad) and not _accepts(hermes, spec, call + "\n" + call)

    auto = ToolPlan(HERMES, (ADD,)).sampling_dict(tok, {})
    assert set(auto) == {"ebnf", "skip_special_tokens"}
    spec = {"ebnf": auto["ebnf"]}
    assert _accepts(hermes, spec, "Plain text, <b>tags</b> and {braces}.")
    assert _accepts(hermes, spec, "Let me add.\n" + call + "\nDone.")
    assert _accepts(hermes, spec, call + "\n" + call)  # parallel calls
    assert not _accepts(hermes, spec, "Adding: " + bad)
    assert not _accepts(hermes, spec, "<tool_call>Sure, I will.")
    one = ToolPlan(HERMES, (ADD,), ToolChoice(parallel=False)).sampling_dict(tok, {})
    assert not _accepts(hermes, {"ebnf": one["ebnf"]}, call + "\n" + call)

    answer = ToolPlan(HERMES, (ADD,)).sampling_dict(tok, {"json_schema": ANSWER})
    spec = {"ebnf": answer["ebnf"]}
    assert _accepts(hermes, spec, call) and _accepts(hermes, spec, '{"city": "Oslo", "temp": 2}')
    assert not _accepts_ids(hermes, spec, spelled)


def test_plans_refuse_two_grammars_and_parse_auto_beside_another_grammar(backend: Any) -> None:
    tok, _ = backend
    forced = ToolPlan(HERMES, (ADD,), ToolChoice("required"))
    with pytest.raises(BadRequestError, match="cannot be combined"):
        forced.sampling_dict(tok, {"regex": "[a-z]+"})
    # A JSON response format is for a text answer: the forced call is made, the format waits.
    d = forced.sampling_dict(tok, {"json_schema": "{}"})
    assert d["json_schema"] is None and "get" not in d and "add" in (d.get("regex") or "")
    auto = ToolPlan(HERMES, (ADD,))
    assert "ebnf" in auto.sampling_dict(tok, {})
    assert auto.sampling_dict(tok, {"regex": "[a-z]+"}) == {}  # the request's grammar; parsed
    assert auto.sampling_dict(tok, {"json_schema": "not json"}) == {}
    assert auto.sampling_dict(tok, {"json_schema": "{}", "allowed_token_ids": [5]}) == {}
    assert ToolPlan(HERMES, (ADD,), ToolChoice("none")).sampling_dict(tok, {}) == {}


ANSWER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}


def test_auto_with_a_json_response_format_is_calls_or_the_answer(backend: Any) -> None:
    """A response format beside `auto` tools (as agent frameworks send a structured output
    type with tools): the output is the format's calls or the answer in the schema, in each
    family's format; text around either, a call of another tool, or an answer that misses the
    schema is refused. Schemas a regex enforces make a regex (length-bounded, as a forced call
    is), others Lark."""
    tok, b = backend
    add = ToolCall("x", "add", '{"a":3}')
    answer = '{"city": "Paris", "temp": 21}'
    cases = [(fmt, tools, kind) for fmt in (HERMES, LLAMA3_JSON)
             for tools, kind in (((ADD,), "regex"), ((ADD, OPEN), "ebnf"))]  # fmt: skip
    for fmt, tools, kind in cases:
        d = ToolPlan(fmt, tools).sampling_dict(tok, {"json_schema": ANSWER})
        assert d["json_schema"] is None and set(d) == {kind, "json_schema"}, fmt.name
        spec = {kind: d[kind]}
        if kind == "regex":
            assert isinstance(b.compile(GrammarSpec("regex", d["regex"])), TokenAutomaton)
        assert _accepts(backend, spec, answer), fmt.name
        assert _accepts(backend, spec, fmt.call_text([add])), fmt.name
        assert _accepts(backend, spec, fmt.call_text([add, add])), fmt.name  # parallel calls
        assert not _accepts(backend, spec, "Sure. " + answer), fmt.name
        assert not _accepts(backend, spec, '{"city": "Paris"}'), fmt.name
        assert not _accepts(backend, spec, fmt.call_text([add]) + answer), fmt.name
        other = fmt.call_text([ToolCall("x", "sub", '{"a":3}')])
        assert not _accepts(backend, spec, other), fmt.name
        assert not _accepts(backend, spec, fmt.call_text([ToolCall("x", "add", '{"a":30}')]))
    one = ToolPlan(HERMES, (ADD,), ToolChoice(parallel=False))
    d = one.sampling_dict(tok, {"json_schema": '{"type": "object"}'})
    spec = {k: d[k] for k in ("regex", "ebnf") if k in d}
    assert _accepts(backend, spec, '{"any": [1, 2]}')  # json_object: any object
    assert not _accepts(backend, spec, HERMES.call_text([add, add]))  # one call at most


def test_mistral_auto_with_a_json_response_format(smollm2_path: Path) -> None:
    from radixrt.grammar.auto_backend import AutoBackend
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    tok.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]"]})
    mistral = (tok, AutoBackend(tok, len(tok), [tok.eos_token_id]))
    d = ToolPlan(MISTRAL, (ADD,)).sampling_dict(tok, {"json_schema": ANSWER})
    spec = {"ebnf": d["ebnf"]}
    call = '{"name":"add","arguments":{"a":3}}'
    assert _accepts(mistral, spec, f"[TOOL_CALLS][{call}]")
    assert _accepts(mistral, spec, '{"city": "Oslo", "temp": -2}')
    assert not _accepts(mistral, spec, f"Adding.[TOOL_CALLS][{call}]")
    assert not _accepts(mistral, spec, f"[{call}]")  # a list of calls without the token


# Parameters as pydantic writes nested models: local references into the tool's own $defs,
# one a recursive reference to its root, a property named like a keyword beside them.
NESTED = ToolSpec(
    "ship",
    "",
    {
        "type": "object",
        "$defs": {
            "Color": {"enum": ["red", "green"], "type": "string"},
            "Addr": {"type": "object", "properties": {"zip": {"type": "string", "maxLength": 5}},
                     "required": ["zip"], "additionalProperties": False},
        },
        "properties": {
            "color": {"$ref": "#/$defs/Color"},
            "default": {"$ref": "#/$defs/Addr"},
        },
        "required": ["color", "default"],
        "additionalProperties": False,
    },
)  # fmt: skip
OTHER = ToolSpec(  # another tool whose $defs use the same name for another schema
    "paint",
    "",
    {
        "type": "object",
        "$defs": {"Color": {"enum": ["blue"]}},
        "properties": {"c": {"$ref": "#/$defs/Color"}},
        "required": ["c"],
        "additionalProperties": False,
    },
)


def test_tools_with_local_references_keep_their_own_definitions(backend: Any) -> None:
    """Inside the call's schema `#` is not a tool's root: each tool's pointers are moved with
    it (pydantic's nested models, as openai's pydantic_function_tool sends them)."""
    ship = ('<tool_call>\n{"name":"ship","arguments":{"color":"red","default":{"zip":"%s"}}}'
            "\n</tool_call>")  # fmt: skip
    paint = '<tool_call>\n{"name":"paint","arguments":{"c":"%s"}}\n</tool_call>'
    for spec in (forced_call_spec(HERMES, [NESTED, OTHER], ToolChoice("required")),
                 auto_call_spec(HERMES, [NESTED, OTHER], ToolChoice())):  # fmt: skip
        assert _accepts(backend, spec, ship % "12345") and _accepts(backend, spec, paint % "blue")
        assert not _accepts(backend, spec, ship % "123456")  # Addr's maxLength
        assert not _accepts(backend, spec, paint % "red")  # paint's Color, not ship's
    assert NESTED.parameters["properties"]["color"] == {"$ref": "#/$defs/Color"}  # not mutated
    # A root $id (a base of its own) is dropped with the move; an anchor is not a pointer.
    base = {"$id": "https://example.com/paint",
            "$schema": "https://json-schema.org/draft/2020-12/schema"}  # fmt: skip
    based = ToolSpec("paint", "", {**OTHER.parameters, **base})
    anchored = {"$defs": {"Color": {"$anchor": "hue", "enum": ["blue"]}},
                "properties": {"c": {"$ref": "#hue"}}}  # fmt: skip
    for tool in (based, ToolSpec("paint", "", {**OTHER.parameters, **anchored})):
        spec = auto_call_spec(HERMES, [NESTED, tool], ToolChoice())
        assert _accepts(backend, spec, paint % "blue") and not _accepts(
            backend, spec, paint % "red"
        )
    refs = {"$defs": {"N": {"type": "integer"}},
            "properties": {"s": {"$ref": "#/$defs/N", "multipleOf": 5}}}  # fmt: skip
    rated = ToolSpec("rate", "", {**OPEN.parameters, **refs})
    lark = forced_call_spec(HERMES, [rated, NESTED], ToolChoice("required"))
    assert list(lark) == ["ebnf"]  # multipleOf: llguidance's path
    assert _accepts(backend, lark, ship % "1") and not _accepts(backend, lark, ship % "123456")


def test_auto_with_allowed_tools_calls_only_those(backend: Any) -> None:
    """`allowed_tools` in mode auto (OpenAI's chat and Responses tool_choice): every tool stays
    in the prompt, but a call may only be of an allowed one, constrained or parsed."""
    tok, _ = backend
    plan = ToolPlan(HERMES, (ADD, OPEN), ToolChoice("auto", allowed=("rate",)))
    spec = {"ebnf": plan.sampling_dict(tok, {})["ebnf"]}
    rate = HERMES.call_text([ToolCall("x", "rate", '{"s":5}')])
    add = HERMES.call_text([ToolCall("x", "add", '{"a":3}')])
    assert _accepts(backend, spec, "Rating: " + rate)
    assert not _accepts(backend, spec, "Adding: " + add)
    parser = plan.new_parser()
    parser.feed(add + rate)
    parser.finish()
    assert [c.name for c in parser.calls] == ["rate"]  # (a call of another tool stays text)
