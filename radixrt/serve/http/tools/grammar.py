"""A forced call as a grammar: the allowed tools' schemas as one choice, each call
`{"name": <its name>, "<args key>": <its parameters>}` in the family's wrapper, one call or
(with `parallel`) several. Written as a regex when that regex enforces every keyword of the
schemas (numeric bounds included: grammar/schema_bounds.py) and is small enough for outlines
(the `auto` backend's test), so the budget-aware masks end the call within max_tokens whenever
it fits; as a Lark grammar (llguidance, every keyword enforced, no length bound) otherwise.
Without a length bound a model that repeats calls would run out of tokens inside one, so
that grammar writes exactly one call even when parallel calls are allowed."""

from __future__ import annotations

import json
import re
from typing import Any

from radixrt.grammar.base import GrammarError
from radixrt.grammar.regex_size import is_small_regex
from radixrt.grammar.schema_regex import schema_enforced, schema_regex
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools.formats import CallFormat
from radixrt.serve.http.tools.spec import ToolChoice, ToolSpec, allowed_tools

# Calls are written compact (`{"name":"f","arguments":{"a":1}}`) on both paths: one layout,
# so a call replayed in the next turn's prompt (formats.call_text, compact_json) has the
# tokens the model produced, and the turn after it reads them from the cache.
_LAYOUT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def call_schema(fmt: CallFormat, tools: list[ToolSpec]) -> dict[str, Any]:
    """One call of any of `tools` as a JSON schema (name first, then the arguments)."""
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, fmt.args_key: t.parameters},
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
        regex = _literal(fmt.forced_open) + calls + _literal(fmt.forced_close)
        if is_small_regex(regex):  # else llguidance would take it, with no length bound
            return {"regex": regex}
    body = json.dumps({**schema, "x-guidance": _LAYOUT})
    lark = (
        f"start: {_lark(fmt.forced_open)} call {_lark(fmt.forced_close)}\n"
        f"call: {_lark(fmt.forced_prefix)} %json {body} {_lark(fmt.forced_suffix)}\n"
    )
    return {"ebnf": lark}


def compact_json(value: Any) -> str:
    """JSON in the forced calls' layout (arguments a client sends back as an object)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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
