"""A forced call as a grammar: the allowed tools' schemas as one choice, each call
`{"name": <its name>, "<args key>": <its parameters>}` in the family's wrapper, one call or
(with `parallel`) several. Written as a regex when that regex enforces every keyword of the
schemas (numeric bounds included: grammar/schema_bounds.py) and is small enough for outlines
(the `auto` backend's test), so the budget-aware masks end the call within max_tokens whenever
it fits. A choice too big for one regex is exactly one call, written as a top-level choice of
one regex per tool, which the grammar layer matches per tool (grammar/union.py), still bounded.
Schemas with a keyword no regex enforces take a Lark grammar (llguidance, every keyword
enforced, no length bound), also of exactly one call: without a bound a model that repeats
calls would run out of tokens inside one; so do calls wrapped in special tokens, which only
Lark can name. `auto`'s grammars (free text, calls opened by the model) are Lark; `auto` beside
a JSON response format is a regex of calls or the answer where one enforces both."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from radixrt.grammar.base import CANONICAL_JSON, COMPACT_JSON, GrammarError
from radixrt.grammar.regex_size import is_small_regex
from radixrt.grammar.schema_regex import schema_enforced, schema_regex
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools.formats import CallFormat
from radixrt.serve.http.tools.spec import ToolChoice, ToolSpec, allowed_tools

# Calls are written compact (`{"name":"f","arguments":{"a":1}}`) on both paths: one layout,
# so a call replayed in the next turn's prompt (formats.call_text, compact_json) has the
# tokens the model produced, and the turn after it reads them from the cache.
_LAYOUT = COMPACT_JSON.guidance()


def call_schema(fmt: CallFormat, tools: list[ToolSpec]) -> dict[str, Any]:
    """One call of any of `tools` as a JSON schema (name first, then the arguments). A tool's
    parameters with local references (`#/$defs/...`, as pydantic writes nested models) sit
    in the root's `$defs` under their own key, their pointers moved there with them: inside
    the call's schema `#` is no longer their root."""
    defs: dict[str, Any] = {}
    options = []
    for i, t in enumerate(tools):
        params = t.parameters
        key = f"tool{i}"
        moved = _moved_refs(params, f"#/$defs/{key}")
        if moved != params:  # (every local pointer moved: it had some)
            # Under the call's root its own $id would start another base for its pointers.
            defs[key] = {k: v for k, v in moved.items() if k not in ("$id", "$schema")}
            params = {"$ref": f"#/$defs/{key}"}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, fmt.args_key: params},
                "required": ["name", fmt.args_key],
                "additionalProperties": False,
            }
        )
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return {**schema, "$defs": defs} if defs else schema


# Keywords whose values are data, not schemas (a "$ref" key inside them is not a reference),
# and those whose values map names to schemas (a name there is not a keyword).
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                            "dependentSchemas", "dependencies"})  # fmt: skip


def _moved_refs(node: Any, root: str) -> Any:
    """The schema `node` with every local JSON-pointer `$ref` ("#" or "#/...") pointing under
    `root` instead of "#" (an anchor, "#name", is not a pointer: left as it is)."""
    if isinstance(node, list):
        return [_moved_refs(v, root) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "$ref" and isinstance(v, str) and (v == "#" or v.startswith("#/")):
            out[k] = root + v[1:]
        elif k in _DATA_KEYWORDS:
            out[k] = v
        elif k in _NAMED_SCHEMAS and isinstance(v, dict):
            out[k] = {name: _moved_refs(sub, root) for name, sub in v.items()}
        else:
            out[k] = _moved_refs(v, root)
    return out


def forced_call_spec(
    fmt: CallFormat,
    tools: list[ToolSpec],
    choice: ToolChoice,
    tokens: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """The sampling fields (`regex` or `ebnf`) that force `choice`'s call(s). `tokens`: the
    format's markers that are special tokens of the model's tokenizer (text never holds
    one), with their ids; a call wrapped in one (Hermes' <tool_call> where the tokenizer marks
    it special) is written with the token, which only a Lark grammar can name."""
    allowed = allowed_tools(tools, choice)
    schema = call_schema(fmt, allowed)
    tokens = tokens or {}
    if schema_enforced(schema) and not _wraps_in_tokens(fmt, tokens):
        regex = _calls_regex(fmt, schema, choice.parallel)
        if is_small_regex(regex):
            return {"regex": regex}
        # One call, as a choice of one branch per tool at the top level: the grammar layer
        # matches it as the union of the tools' own automata (each the regex of that tool's
        # named call), so the bound holds for any number of tools.
        return {"regex": "|".join(_one_call(fmt, t) for t in allowed)}
    return {"ebnf": "start: calls\n" + _calls_rules(fmt, schema, False, tokens)}


def _calls_regex(fmt: CallFormat, schema: dict[str, Any], parallel: bool) -> str:
    """The regex of the format's calls (one, or with `parallel` several) of the call schema
    `schema`, as forced calls are written."""
    one = (
        literal_regex(fmt.forced_prefix)
        + f"(?:{_call_regex(schema)})"
        + literal_regex(fmt.forced_suffix)
    )
    calls = f"{one}(?:{literal_regex(fmt.forced_sep)}{one})*" if parallel else one
    return literal_regex(fmt.forced_open) + calls + literal_regex(fmt.forced_close)


def _wraps_in_tokens(fmt: CallFormat, tokens: Mapping[str, int]) -> bool:
    """Whether a forced call's own text holds one of the special tokens `tokens`."""
    return any(m in tokens for m in (fmt.opener, fmt.closer) if m and not fmt.array)


def _calls_rules(
    fmt: CallFormat, schema: dict[str, Any], parallel: bool, tokens: Mapping[str, int]
) -> str:
    """Lark rules `calls` (the format's calls as forced calls are written, behind the opener
    of an array format where it is a special token: Mistral's [TOOL_CALLS]) and `call` (one
    call of the call schema `schema`), each special token of `tokens` written as itself."""
    body = json.dumps({**schema, "x-guidance": _LAYOUT})
    opener = fmt.opener if fmt.array and fmt.opener in tokens else ""
    more = f"({_lark(fmt.forced_sep)} call)*" if parallel else ""
    return (
        f"calls: {_lark(opener, tokens)} {_lark(fmt.forced_open)} call {more} "
        f"{_lark(fmt.forced_close)}\n"
        f"call: {_lark(fmt.forced_prefix, tokens)} %json {body} "
        f"{_lark(fmt.forced_suffix, tokens)}\n"
    )


def _one_call(fmt: CallFormat, tool: ToolSpec) -> str:
    """The regex of exactly one call of `tool` (the same text as its named call's)."""
    call = _call_regex(call_schema(fmt, [tool]))
    one = literal_regex(fmt.forced_prefix) + f"(?:{call})" + literal_regex(fmt.forced_suffix)
    return literal_regex(fmt.forced_open) + one + literal_regex(fmt.forced_close)


def _call_regex(schema: dict[str, Any]) -> str:
    try:
        return schema_regex(json.dumps(schema), layout=COMPACT_JSON)
    except GrammarError as e:
        raise BadRequestError(f"tools: {e}") from None


def compact_json(value: Any) -> str:
    """JSON in the forced calls' layout (arguments a client sends back as an object)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def auto_call_spec(
    fmt: CallFormat,
    tools: list[ToolSpec],
    choice: ToolChoice,
    tokens: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """`auto`: free text, but once the model writes the format's opener, the rest of that
    call is constrained to a call of one of `tools` (llguidance's lazy lexeme: the text ends
    where the opener is written). Formats whose calls open the output (Llama 3 JSON) may
    start with calls or with text that is not one. An opener that is a special token of
    `tokens` (Mistral's [TOOL_CALLS]; Hermes' <tool_call> where the tokenizer marks it
    special) ends the text, no text lexeme holding a special token, and starts the calls;
    {} for an array format whose opener is not a special token."""
    schema = call_schema(fmt, tools)
    tokens = tokens or {}
    if fmt.opener is not None and fmt.array:
        if fmt.opener not in tokens:
            return {}
        return {
            "ebnf": "%llguidance {}\n"
            "start: TEXT calls?\n"
            "TEXT: /(.|\\n)*/\n" + _calls_rules(fmt, schema, choice.parallel, tokens)
        }
    body = json.dumps({**schema, "x-guidance": _LAYOUT})
    if fmt.opener in tokens:  # (a wrapped call: its opener a special token)
        calls = "(call TEXT)*" if choice.parallel else "(call TEXT)?"
        return {
            "ebnf": "%llguidance {}\n"
            f"start: TEXT {calls}\n"
            "TEXT: /(.|\\n)*/\n"
            f"call: {_lark(fmt.forced_prefix, tokens)} %json {body} "
            f"{_lark(fmt.forced_suffix, tokens)}\n"
        }
    if fmt.opener is not None and not fmt.array and fmt.forced_prefix.startswith(fmt.opener):
        rest = fmt.forced_prefix[len(fmt.opener) :]
        return {
            "ebnf": "%llguidance {}\n"
            f"start: {'call*' if choice.parallel else 'call?'} TEXT\n"
            "TEXT: /(.|\\n)*/\n"
            f"opener[lazy]: TEXT {_lark(fmt.opener)}\n"
            f"call: opener {_lark(rest)} %json {body} {_lark(fmt.forced_suffix, tokens)}\n"
        }
    if fmt.opener is None:
        return {
            "ebnf": "start: TEXT | calls\n"
            "TEXT: /(\\s*[^{\\s](.|\\n)*)?/\n" + _calls_rules(fmt, schema, choice.parallel, tokens)
        }
    return {}


def auto_call_or_json_spec(
    fmt: CallFormat,
    tools: list[ToolSpec],
    choice: ToolChoice,
    response: dict[str, Any],
    tokens: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """`auto` with a JSON response format: the output is either the format's calls of
    `tools` (written as forced calls are, with the special tokens of `tokens` as themselves:
    Mistral's behind its [TOOL_CALLS]) or one JSON value of the schema `response` (in the
    response formats' layout), nothing else, so a model asked for a structured answer may
    still call a tool first. A regex (length-bounded, as a forced call or a response format
    alone is) where one enforces both schemas and names no special token, else Lark
    (llguidance, no length bound); a choice too big for one regex is, as a forced one, a
    top-level choice of one call of each tool or the answer. {} for an array format whose
    opener is not a special token."""
    tokens = tokens or {}
    if fmt.opener is not None and fmt.array and fmt.opener not in tokens:
        return {}
    schema = call_schema(fmt, tools)
    plain = not fmt.array and not _wraps_in_tokens(fmt, tokens)  # (calls without a token)
    if plain and schema_enforced(schema) and schema_enforced(response):
        try:
            answer_regex = schema_regex(json.dumps(response), layout=CANONICAL_JSON)
        except GrammarError:
            answer_regex = ""  # (llguidance says what is wrong with it)
        regex = f"(?:{_calls_regex(fmt, schema, choice.parallel)})|(?:{answer_regex})"
        if answer_regex and is_small_regex(regex):
            return {"regex": regex}
        if answer_regex and is_small_regex(answer_regex):  # as forced calls: one call
            return {"regex": "|".join([*(_one_call(fmt, t) for t in tools), answer_regex])}
    answer = json.dumps({**response, "x-guidance": CANONICAL_JSON.guidance()})
    calls = _calls_rules(fmt, schema, choice.parallel, tokens)
    return {"ebnf": f"%llguidance {{}}\nstart: calls | answer\n{calls}answer: %json {answer}\n"}


def literal_regex(text: str) -> str:
    """`text` as a regex matching only itself (newlines as `\\n`, which every engine reads)."""
    return re.escape(text).replace("\\\n", "\\n")


def _lark(text: str, tokens: Mapping[str, int] | None = None) -> str:
    """A Lark sequence matching `text`: string literals, and each special token of `tokens`
    in it as that token (`<[id]>`); nothing for the empty string."""
    if not tokens:
        return json.dumps(text) if text else ""
    marks = "|".join(map(re.escape, sorted(tokens, key=len, reverse=True)))
    parts = re.split(f"({marks})", text)
    return " ".join(f"<[{tokens[p]}]>" if p in tokens else json.dumps(p) for p in parts if p)
