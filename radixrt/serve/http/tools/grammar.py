"""A forced call as a grammar: the allowed tools' schemas as one choice, each call
`{"name": <its name>, "<args key>": <its parameters>}` in the family's wrapper, one call or
(with `parallel`) several. Written as a regex when that regex enforces every keyword of the
schemas (numeric bounds included: grammar/schema_bounds.py) and is small enough for outlines
(the `auto` backend's test), so the budget-aware masks end the call within max_tokens whenever
it fits. A choice too big for one regex is exactly one call, written as a top-level choice of
one regex per tool, which the grammar layer matches per tool (grammar/union.py), still bounded.
Schemas with a keyword no regex enforces take a Lark grammar (llguidance, every keyword
enforced, no length bound), also of exactly one call: without a bound a model that repeats
calls would run out of tokens inside one."""

from __future__ import annotations

import json
import re
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


def forced_call_spec(fmt: CallFormat, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, str]:
    """The sampling fields (`regex` or `ebnf`) that force `choice`'s call(s)."""
    allowed = allowed_tools(tools, choice)
    schema = call_schema(fmt, allowed)
    if schema_enforced(schema):
        one = (
            literal_regex(fmt.forced_prefix)
            + f"(?:{_call_regex(schema)})"
            + literal_regex(fmt.forced_suffix)
        )
        calls = f"{one}(?:{literal_regex(fmt.forced_sep)}{one})*" if choice.parallel else one
        regex = literal_regex(fmt.forced_open) + calls + literal_regex(fmt.forced_close)
        if is_small_regex(regex):
            return {"regex": regex}
        # One call, as a choice of one branch per tool at the top level: the grammar layer
        # matches it as the union of the tools' own automata (each the regex of that tool's
        # named call), so the bound holds for any number of tools.
        return {"regex": "|".join(_one_call(fmt, t) for t in allowed)}
    return {"ebnf": "start: calls\n" + _calls_rules(fmt, schema, parallel=False)}


def _calls_rules(
    fmt: CallFormat, schema: dict[str, Any], parallel: bool, token_id: int | None = None
) -> str:
    """Lark rules `calls` (the format's calls as forced calls are written, behind the special
    token `token_id` where there is one: Mistral's [TOOL_CALLS]) and `call` (one call of the
    call schema `schema`)."""
    body = json.dumps({**schema, "x-guidance": _LAYOUT})
    token = "" if token_id is None else f"<[{token_id}]> "
    more = f"({_lark(fmt.forced_sep)} call)*" if parallel else ""
    return (
        f"calls: {token}{_lark(fmt.forced_open)} call {more} {_lark(fmt.forced_close)}\n"
        f"call: {_lark(fmt.forced_prefix)} %json {body} {_lark(fmt.forced_suffix)}\n"
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
    fmt: CallFormat, tools: list[ToolSpec], choice: ToolChoice, opener_id: int | None = None
) -> dict[str, str]:
    """`auto`: free text, but once the model writes the format's opener, the rest of that
    call is constrained to a call of one of `tools` (llguidance's lazy lexeme: the text ends
    where the opener is written). Formats whose calls open the output (Llama 3 JSON) may
    start with calls or with text that is not one. An opener that is a special token
    (Mistral's [TOOL_CALLS], token `opener_id`) ends the text (no text lexeme holds a special
    token) and starts the list of calls; {} for an array format without its token id."""
    schema = call_schema(fmt, tools)
    if fmt.opener is not None and fmt.array:
        if opener_id is None:
            return {}
        return {
            "ebnf": "%llguidance {}\n"
            "start: TEXT calls?\n"
            "TEXT: /(.|\\n)*/\n" + _calls_rules(fmt, schema, choice.parallel, opener_id)
        }
    if fmt.opener is not None and not fmt.array and fmt.forced_prefix.startswith(fmt.opener):
        rest = fmt.forced_prefix[len(fmt.opener) :]
        body = json.dumps({**schema, "x-guidance": _LAYOUT})
        return {
            "ebnf": "%llguidance {}\n"
            f"start: {'call*' if choice.parallel else 'call?'} TEXT\n"
            "TEXT: /(.|\\n)*/\n"
            f"opener[lazy]: TEXT {_lark(fmt.opener)}\n"
            f"call: opener {_lark(rest)} %json {body} {_lark(fmt.forced_suffix)}\n"
        }
    if fmt.opener is None:
        return {
            "ebnf": "start: TEXT | calls\n"
            "TEXT: /(\\s*[^{\\s](.|\\n)*)?/\n" + _calls_rules(fmt, schema, choice.parallel)
        }
    return {}


def auto_call_or_json_spec(
    fmt: CallFormat,
    tools: list[ToolSpec],
    choice: ToolChoice,
    response: dict[str, Any],
    opener_id: int | None = None,
) -> dict[str, str]:
    """`auto` with a JSON response format: the output is either the format's calls of
    `tools` (written as forced calls are, Mistral's behind its [TOOL_CALLS] token
    `opener_id`) or one JSON value of the schema `response` (in the response formats'
    layout), nothing else, so a model asked for a structured answer may still call a tool
    first. {} for an array format without its token id."""
    array = fmt.opener is not None and fmt.array  # calls behind the special token
    if array and opener_id is None:
        return {}
    answer = json.dumps({**response, "x-guidance": CANONICAL_JSON.guidance()})
    calls = _calls_rules(
        fmt, call_schema(fmt, tools), choice.parallel, opener_id if array else None
    )
    return {"ebnf": f"%llguidance {{}}\nstart: calls | answer\n{calls}answer: %json {answer}\n"}


def literal_regex(text: str) -> str:
    """`text` as a regex matching only itself (newlines as `\\n`, which every engine reads)."""
    return re.escape(text).replace("\\\n", "\\n")


def _lark(text: str) -> str:
    """A Lark string literal of `text`; nothing for the empty string."""
    return json.dumps(text) if text else ""
