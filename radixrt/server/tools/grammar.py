"""A forced call as a grammar: the allowed tools' schemas as one choice, each call
`{"name": <its name>, "<args key>": <its parameters>}` in the family's wrapper, one call or
(with `parallel`) several. Written as a regex when outlines enforces every keyword of the
schemas, so the budget-aware masks end the call within max_tokens whenever it fits; as a
Lark grammar (llguidance, numeric bounds and the rest enforced, no length bound) otherwise.
Without a length bound a model that repeats calls would run out of tokens inside one, so
that grammar writes exactly one call even when parallel calls are allowed."""

from __future__ import annotations

import json
import re
from typing import Any

from radixrt.grammar.base import GrammarError
from radixrt.grammar.schema_regex import schema_enforced, schema_regex
from radixrt.server.protocol import BadRequestError
from radixrt.server.tools.formats import CallFormat
from radixrt.server.tools.spec import ToolChoice, ToolSpec, allowed_tools

# Calls are written compact (`{"name":"f","arguments":{"a":1}}`) on both paths: one layout,
# so a call replayed in the next turn's prompt (formats.call_text, compact_json) has the
# tokens the model produced, and the turn after it reads them from the cache.
_LAYOUT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
# An integer range this small is written as its values (an enum the regex enforces), so a
# tool with a bounded count or rating keeps the length-bounded path.
MAX_RANGE_AS_ENUM = 128
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMAS = ("items", "additionalProperties")


def call_schema(fmt: CallFormat, tools: list[ToolSpec]) -> dict[str, Any]:
    """One call of any of `tools` as a JSON schema (name first, then the arguments)."""
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, fmt.args_key: ranges_as_enums(t.parameters)},
            "required": ["name", fmt.args_key],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def forced_call_spec(fmt: CallFormat, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, str]:
    """The sampling fields (`regex` or `ebnf`) that force `choice`'s call(s)."""
    schema = call_schema(fmt, allowed_tools(tools, choice))
    if schema_enforced(schema):
        try:
            call = schema_regex(json.dumps(schema), whitespace="")
        except GrammarError as e:
            raise BadRequestError(f"tools: {e}") from None
        one = _literal(fmt.forced_prefix) + f"(?:{call})" + _literal(fmt.forced_suffix)
        calls = f"{one}(?:{_literal(fmt.forced_sep)}{one})*" if choice.parallel else one
        return {"regex": _literal(fmt.forced_open) + calls + _literal(fmt.forced_close)}
    body = json.dumps({**schema, "x-guidance": _LAYOUT})
    lark = (
        f"start: {_lark(fmt.forced_open)} call {_lark(fmt.forced_close)}\n"
        f"call: {_lark(fmt.forced_prefix)} %json {body} {_lark(fmt.forced_suffix)}\n"
    )
    return {"ebnf": lark}


def ranges_as_enums(schema: Any) -> Any:
    """`schema` with every integer bounded on both sides by at most MAX_RANGE_AS_ENUM values
    written as the enum of those values (the same set of valid documents)."""
    if isinstance(schema, list):
        return [ranges_as_enums(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: ranges_as_enums(v) for k, v in out[key].items()}
    for key in (*_SUBSCHEMAS, "anyOf"):
        if key in out:
            out[key] = ranges_as_enums(out[key])
    lo, hi = out.get("minimum"), out.get("maximum")
    if out.get("type") == "integer" and _is_int(lo) and _is_int(hi) and "enum" not in out:
        if 0 <= hi - lo < MAX_RANGE_AS_ENUM:
            for key in ("type", "minimum", "maximum"):
                out.pop(key)
            out["enum"] = list(range(lo, hi + 1))
    return out


def compact_json(value: Any) -> str:
    """JSON in the forced calls' layout (arguments a client sends back as an object)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def auto_call_spec(fmt: CallFormat, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, str]:
    """`auto`: free text, but once the model writes the format's opener, the rest of that
    call is constrained to a call of one of `tools` (llguidance's lazy lexeme: the text ends
    where the opener is written). Formats whose calls open the output (Llama 3 JSON) may
    start with calls or with text that is not one. {} for formats whose opener is a special
    token (Mistral): the parser alone reads those."""
    schema = json.dumps({**call_schema(fmt, tools), "x-guidance": _LAYOUT})
    calls = "call*" if choice.parallel else "call?"
    if fmt.opener is not None and not fmt.array and fmt.forced_prefix.startswith(fmt.opener):
        rest = fmt.forced_prefix[len(fmt.opener) :]
        return {
            "ebnf": "%llguidance {}\n"
            f"start: {calls} TEXT\n"
            "TEXT: /(.|\\n)*/\n"
            f"opener[lazy]: TEXT {_lark(fmt.opener)}\n"
            f"call: opener {_lark(rest)} %json {schema} {_lark(fmt.forced_suffix)}\n"
        }
    if fmt.opener is None:
        more = f"({_lark(fmt.forced_sep)} call)*" if choice.parallel else ""
        return {
            "ebnf": f"start: TEXT | call {more}\n"
            "TEXT: /(\\s*[^{\\s](.|\\n)*)?/\n"
            f"call: %json {schema}\n"
        }
    return {}


def _literal(text: str) -> str:
    """`text` as a regex matching only itself (newlines as `\\n`, which every engine reads)."""
    return re.escape(text).replace("\\\n", "\\n")


def _lark(text: str) -> str:
    """A Lark string literal of `text`; nothing for the empty string."""
    return json.dumps(text) if text else ""
