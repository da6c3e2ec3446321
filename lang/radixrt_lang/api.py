"""The primitives a program appends: gen, select, typed gens and role blocks."""

from __future__ import annotations

from typing import Any

from radixrt_lang import choices as choice_methods
from radixrt_lang import ir, typed
from radixrt_lang.choices import BaseChoiceMethod
from radixrt_lang.tools import Tool, call_schema, tool_spec

_METHODS = {
    m.name: m
    for m in (
        choice_methods.token_length_normalized,
        choice_methods.greedy_token_selection,
        choice_methods.unconditional_likelihood_normalized,
    )
}


def gen(
    name: str | None = None,
    *,
    choices: list[str] | None = None,
    choices_method: BaseChoiceMethod | str | None = None,
    dtype: type | None = None,
    **params: Any,
) -> ir.Expr:
    """Generate text into variable `name`.

    `params` are sampling parameters (see `SamplingParams`): max_tokens, min_tokens, stop,
    stop_token_ids, temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty,
    repetition_penalty, seed, ignore_eos, return_logprob, top_logprobs_num, regex,
    json_schema, prediction (the text the output will mostly repeat: a speed hint that
    changes nothing else), logit_bias ({token id: value in [-100, 100]} added to the
    logits), allowed_token_ids (only these ids are sampled). `dtype` (int, float, bool,
    str) constrains the output to that type and stores the parsed value; `choices` makes this
    a `select`; `tools` a `tool_call`.
    """
    if choices is not None:
        return select(name, choices, choices_method=choices_method)
    if "tools" in params:
        return tool_call(name, params.pop("tools"), **params)
    sp = ir.SamplingParams.from_kwargs(params)
    if dtype is not None:
        typed.regex_for(dtype)  # validates the dtype
        if sp.regex is not None or sp.json_schema is not None:
            raise ValueError("give dtype or regex/json_schema, not both")
        if dtype is not str and sp.max_new_tokens is None:
            sp.max_new_tokens = typed.TYPED_MAX_NEW_TOKENS
    return ir.Gen(name, sp, dtype)


def tool_call(name: str | None = None, tools: list[Tool] | None = None, **params: Any) -> ir.Expr:
    """Generate a call of one of `tools` (dicts, OpenAI-style tools or Python functions):
    the text is the call as JSON, the variable holds {"name", "arguments"}, the arguments
    valid against the tool's schema by construction (the backend must enforce json_schema).
    Run it with `run_call(state[name], tools)`."""
    if not tools:
        raise ValueError("tool_call needs tools")
    sp = ir.SamplingParams.from_kwargs(params)
    if sp.regex is not None or sp.json_schema is not None:
        raise ValueError("a tool_call's grammar comes from its tools: no regex or json_schema")
    specs = [tool_spec(t) for t in tools]
    call_schema(specs)  # validates the names now, not at run time
    return ir.Gen(name, sp, None, specs)


def gen_int(name: str | None = None, **params: Any) -> ir.Expr:
    """Generate an integer (stored as int)."""
    return gen(name, dtype=int, **params)


def gen_string(name: str | None = None, **params: Any) -> ir.Expr:
    """Generate a double-quoted string; the variable holds its content without the quotes."""
    return gen(name, dtype=str, **params)


def select(
    name: str | None = None,
    choices: list[str] | None = None,
    *,
    choices_method: BaseChoiceMethod | str | None = None,
) -> ir.Expr:
    """Append the most likely of `choices` (scored by `choices_method`, by default the mean
    token logprob) and store it in variable `name`."""
    if not choices or not all(isinstance(c, str) and c for c in choices):
        raise ValueError("select needs a non-empty list of non-empty strings as choices")
    method = choices_method or choice_methods.token_length_normalized
    if isinstance(method, str):
        if method not in _METHODS:
            raise ValueError(f"unknown choices_method {method!r}; known: {sorted(_METHODS)}")
        method = _METHODS[method]
    return ir.Select(name, list(choices), method)


def system(expr: object) -> ir.Expr:
    """A system message holding `expr` (rendered with the model's chat template)."""
    return _role("system", expr)


def user(expr: object) -> ir.Expr:
    return _role("user", expr)


def assistant(expr: object) -> ir.Expr:
    return _role("assistant", expr)


def _role(role: str, expr: object) -> ir.Expr:
    return ir.Seq([ir.RoleBegin(role), ir.to_expr(expr), ir.RoleEnd(role)])
