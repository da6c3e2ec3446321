"""Constrained output on the OpenAI routes in the other engines' spellings, as one sampling
spec (`regex`, `json_schema` or `ebnf`): SGLang's `regex`, `ebnf` and `json_schema` fields,
vLLM's `structured_outputs` ({"json" | "regex" | "choice" | "grammar" | "json_object"}) and
its older `guided_json`, `guided_regex`, `guided_choice` and `guided_grammar`. A choice is a
regex of the escaped alternatives; a grammar is GBNF (`root ::= ...`, as llama.cpp, xgrammar
and SGLang write it) or Lark, both taken by the `ebnf` spec. More than one spec: 400."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.grammar.base import SPEC_KINDS
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools.grammar import literal_regex


class StructuredOutputs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """vLLM's `structured_outputs`: one of these."""

    json: dict[str, Any] | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    # Any value: JSON is always written without free whitespace here (grammar/base.py's
    # canonical layout), which satisfies either.
    disable_any_whitespace: bool | None = None


class StructuredFields(msgspec.Struct, kw_only=True):
    """The request fields that ask for constrained output besides `response_format`."""

    regex: str | None = None
    ebnf: str | None = None
    json_schema: dict[str, Any] | str | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    # vLLM's choice of grammar engine: taken, not used (every backend here enforces the same
    # constraint; --grammar-backend picks the engine).
    guided_decoding_backend: str | None = None

    def spec_dict(self) -> dict[str, Any]:
        """{"regex" | "json_schema" | "ebnf": spec} for what was asked ({} for nothing)."""
        so = self.structured_outputs or StructuredOutputs()
        asked = [
            ("regex", self.regex, "regex"),
            ("ebnf", self.ebnf, "ebnf"),
            ("json_schema", self.json_schema, "json_schema"),
            ("json_schema", so.json, "structured_outputs.json"),
            ("regex", so.regex, "structured_outputs.regex"),
            ("regex", _choice_regex(so.choice, "structured_outputs.choice"),
             "structured_outputs.choice"),
            ("ebnf", so.grammar, "structured_outputs.grammar"),
            ("json_schema", {"type": "object"} if so.json_object else None,
             "structured_outputs.json_object"),
            ("json_schema", self.guided_json, "guided_json"),
            ("regex", self.guided_regex, "guided_regex"),
            ("regex", _choice_regex(self.guided_choice, "guided_choice"), "guided_choice"),
            ("ebnf", self.guided_grammar, "guided_grammar"),
        ]  # fmt: skip
        given = [(kind, value, name) for kind, value, name in asked if value is not None]
        if len(given) > 1:
            names = ", ".join(name for _, _, name in given)
            raise BadRequestError(f"give one constraint on the output, not {names}")
        return {kind: value for kind, value, _ in given}


def _choice_regex(choices: list[str] | None, name: str) -> str | None:
    """A regex matching exactly one of `choices`; None when not given."""
    if choices is None:
        return None
    if not choices:
        raise BadRequestError(f"{name} must be a non-empty list of strings")
    return "(" + "|".join(literal_regex(c) for c in choices) + ")"


def add_spec(d: dict[str, Any], spec: dict[str, Any], where: str) -> None:
    """Put `spec` (another source's constraint, e.g. response_format) into the sampling dict
    `d`; 400 if `d` has one already."""
    if spec and any(d.get(k) is not None for k in SPEC_KINDS):
        raise BadRequestError(f"give one constraint on the output: {where} and another")
    d.update(spec)
