"""The checks `SamplingParams.from_dict` runs once, at the edge: each field's plain type, its
range (the float ranges the float32 sampler handles without overflow or underflow), and the
convenience forms it coerces first."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TEMPERATURE_RANGE = (0.0, 100.0)  # 0 is greedy (README.md lists the ranges)
REPETITION_PENALTY_RANGE = (0.01, 100.0)
LOGIT_BIAS_RANGE = (-100.0, 100.0)  # OpenAI's: -100 all but bans a token, 100 all but forces it
# Tokens one logit_bias may list: the sampler adds them per row and step (a whole vocabulary's
# map would cost milliseconds a row); a ban or push of that many is no real use.
MAX_LOGIT_BIAS_TOKENS = 1024
# Ids one allowed_token_ids may list (the largest vocabularies served are about 2**18).
MAX_ALLOWED_TOKEN_IDS = 2**18
_KIND_CHECKS = {
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: type(v) is int,
    "float": lambda v: type(v) in (int, float),
    "str": lambda v: isinstance(v, str),
}


def field_kinds(cls: type[msgspec.Struct]) -> dict[str, str]:
    """Each field's annotation without spaces ("int", "float|None", "list[str]")."""
    return {name: kind.replace(" ", "") for name, kind in cls.__annotations__.items()}


def normalized(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Convenience forms coerced: a single stop string or regex, None lists, a json_schema
    given as an object, top_k 0 (off) as -1."""
    out = dict(kwargs)
    if out.get("stop", []) is None:
        out["stop"] = []
    elif isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
    if out.get("stop_regex", []) is None:
        out["stop_regex"] = []
    elif isinstance(out.get("stop_regex"), str):
        out["stop_regex"] = [out["stop_regex"]]
    for name in ("stop_token_ids", "prediction_ids", "allowed_token_ids"):
        if name in out and out[name] is None:
            out[name] = []
    if "logit_bias" in out:
        out["logit_bias"] = _bias_by_id(out["logit_bias"])
    schema = out.get("json_schema")
    if schema is not None and not isinstance(schema, str):
        try:
            out["json_schema"] = json.dumps(schema)
        except (TypeError, ValueError, RecursionError) as e:
            raise ValueError(f"invalid sampling parameter json_schema: {e}") from None
    if out.get("top_k") == 0:
        out["top_k"] = -1
    return out


def _bias_by_id(bias: Any) -> Any:
    """logit_bias with its keys as ints: JSON's strings of decimal digits ("50256") taken as the
    ids they spell; None as {}. ValueError names a key that is no token id; a value that is no
    dict is left for `value_checks` to refuse."""
    if bias is None:
        return {}
    if not isinstance(bias, dict):
        return bias
    out: dict[Any, Any] = {}
    for key, value in bias.items():
        if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 19:
            key = int(key)
        if type(key) is not int:
            raise ValueError(
                f"invalid sampling parameter logit_bias: key {key!r} is not a token id "
                "(an integer, or a string of one)"
            )
        out[key] = value
    return out


def check_kind(name: str, kind: str, value: Any) -> None:
    """ValueError naming the field when `value` is not of a plain type the field takes."""
    if value is None and kind.endswith("|None"):
        return
    base = kind.removesuffix("|None")
    if not _KIND_CHECKS.get(base, lambda v: True)(value):
        shown = kind.replace("|", " | ")
        raise ValueError(f"invalid sampling parameter {name}={value!r}: must be of type {shown}")


def value_checks(sp: Any) -> list[tuple[str, bool, str]]:
    """(field, whether its value is allowed, what it must be) for each checked field of `sp`,
    a SamplingParams (core/sampling.py, which imports this module) whose field types are
    checked already (`check_kind`)."""
    lo_t, hi_t = TEMPERATURE_RANGE
    lo_r, hi_r = REPETITION_PENALTY_RANGE
    lo_b, hi_b = LOGIT_BIAS_RANGE
    return [
        (
            "max_new_tokens",
            _is_int(sp.max_new_tokens, 0),
            f"must be an integer in [0, {INT64_MAX}]",
        ),
        (
            "min_new_tokens",
            _is_int(sp.min_new_tokens, 0) and sp.min_new_tokens <= sp.max_new_tokens,
            "must be an integer in [0, max_new_tokens]",
        ),
        (
            "temperature",
            _is_num(sp.temperature) and lo_t <= sp.temperature <= hi_t,
            f"must be in [{lo_t:g}, {hi_t:g}]",
        ),
        ("top_p", _is_num(sp.top_p) and 0 < sp.top_p <= 1, "must be in (0, 1]"),
        (
            "top_k",
            _is_int(sp.top_k, -1) and sp.top_k != 0,
            f"must be -1 or 0 (off), or an integer in [1, {INT64_MAX}]",
        ),
        ("min_p", _is_num(sp.min_p) and 0 <= sp.min_p <= 1, "must be in [0, 1]"),
        (
            "repetition_penalty",
            _is_num(sp.repetition_penalty) and lo_r <= sp.repetition_penalty <= hi_r,
            f"must be in [{lo_r:g}, {hi_r:g}]",
        ),
        (
            "frequency_penalty",
            _is_num(sp.frequency_penalty) and -2 <= sp.frequency_penalty <= 2,
            "must be in [-2, 2]",
        ),
        (
            "presence_penalty",
            _is_num(sp.presence_penalty) and -2 <= sp.presence_penalty <= 2,
            "must be in [-2, 2]",
        ),
        (
            "seed",
            sp.seed is None or _is_int(sp.seed, INT64_MIN),
            f"must be an integer in [{INT64_MIN}, {INT64_MAX}]",
        ),
        (
            "stop",
            isinstance(sp.stop, list) and all(isinstance(s, str) and s for s in sp.stop),
            "must be a non-empty string or a list of them",
        ),
        (
            "stop_regex",
            isinstance(sp.stop_regex, list)
            and all(isinstance(s, str) and s for s in sp.stop_regex),
            "must be a non-empty string or a list of them",
        ),
        ("no_stop_trim", isinstance(sp.no_stop_trim, bool), "must be a boolean"),
        (
            "spaces_between_special_tokens",
            isinstance(sp.spaces_between_special_tokens, bool),
            "must be a boolean",
        ),
        (
            "stop_token_ids",
            isinstance(sp.stop_token_ids, list) and all(_is_int(t, 0) for t in sp.stop_token_ids),
            f"must be a list of token ids (integers in [0, {INT64_MAX}])",
        ),
        (
            "prediction_ids",
            isinstance(sp.prediction_ids, list) and all(_is_int(t, 0) for t in sp.prediction_ids),
            f"must be a list of token ids (integers in [0, {INT64_MAX}])",
        ),
        (
            "logit_bias",
            isinstance(sp.logit_bias, dict)
            and len(sp.logit_bias) <= MAX_LOGIT_BIAS_TOKENS
            and all(_is_int(t, 0) for t in sp.logit_bias)
            and all(_is_num(v) and lo_b <= v <= hi_b for v in sp.logit_bias.values()),
            f"must map at most {MAX_LOGIT_BIAS_TOKENS} token ids to numbers in "
            f"[{lo_b:g}, {hi_b:g}]",
        ),
        (
            "allowed_token_ids",
            isinstance(sp.allowed_token_ids, list)
            and len(sp.allowed_token_ids) <= MAX_ALLOWED_TOKEN_IDS
            and all(_is_int(t, 0) for t in sp.allowed_token_ids),
            f"must be a list of at most {MAX_ALLOWED_TOKEN_IDS} token ids (integers >= 0)",
        ),
        ("ignore_eos", isinstance(sp.ignore_eos, bool), "must be a boolean"),
        ("n", _is_int(sp.n, 1), f"must be an integer in [1, {INT64_MAX}]"),
        (
            "skip_special_tokens",
            isinstance(sp.skip_special_tokens, bool),
            "must be a boolean",
        ),
        ("return_logprob", isinstance(sp.return_logprob, bool), "must be a boolean"),
        ("end_on_exit", isinstance(sp.end_on_exit, bool), "must be a boolean"),
        (
            "top_logprobs_num",
            _is_int(sp.top_logprobs_num, 0),
            f"must be an integer in [0, {INT64_MAX}]",
        ),
        (
            "reasoning_end_id",
            sp.reasoning_end_id is None or _is_int(sp.reasoning_end_id, 0),
            f"must be a token id (an integer in [0, {INT64_MAX}])",
        ),
        (
            "reasoning_start_id",
            sp.reasoning_start_id is None or _is_int(sp.reasoning_start_id, 0),
            f"must be a token id (an integer in [0, {INT64_MAX}])",
        ),
        (
            "thinking_token_budget",
            sp.thinking_token_budget is None or _is_int(sp.thinking_token_budget, 0),
            f"must be an integer in [0, {INT64_MAX}]",
        ),
        (
            "logprob_start_len",
            _is_int(sp.logprob_start_len, -1),
            f"must be an integer in [-1, {INT64_MAX}]",
        ),
    ]


def _is_num(x: object) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x: object, low: int) -> bool:
    """An int (not a bool) in [low, INT64_MAX]."""
    return type(x) is int and low <= x <= INT64_MAX
