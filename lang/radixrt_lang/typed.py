"""Typed `gen` (dtype int/float/bool/str): the regex that constrains each type, and the parser
that turns generated text into a value.

On a backend that does not enforce regexes, the interpreter generates unconstrained text and
the parser recovers the first value of the type from it (or raises OutputParseError); where
the backend enforces them (the radixrt server and Engine), the same parser only checks and
converts. bool is a `select` where the backend can
score prompts, so it is exact either way.
"""

from __future__ import annotations

import re

from radixrt_lang.errors import OutputParseError

INT_REGEX = r"[-+]?[0-9]+"
FLOAT_REGEX = r"[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?"
BOOL_REGEX = r"(True|False)"
STR_REGEX = r'"[^"\n]*"'
BOOL_CHOICES = ["True", "False"]
TYPED_MAX_NEW_TOKENS = 16  # an int, float or bool needs few tokens; strings keep the default

_REGEX = {int: INT_REGEX, float: FLOAT_REGEX, bool: BOOL_REGEX, str: STR_REGEX}
# What the parser looks for in unconstrained text (more lenient than the regexes above).
_SEARCH = {
    int: re.compile(r"[-+]?\d+"),
    float: re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"),
    bool: re.compile(r"\b(true|false|yes|no)\b", re.IGNORECASE),
}


def regex_for(dtype: type) -> str:
    if dtype not in _REGEX:
        raise TypeError(f"dtype must be one of int, float, bool, str; got {dtype!r}")
    return _REGEX[dtype]


def parse(dtype: type, text: str) -> tuple[int | float | bool | str, str]:
    """(value, the text that holds it) for the first value of `dtype` in `text`."""
    if dtype is str:
        return text, text
    m = _SEARCH[dtype].search(text)
    if m is None:
        raise OutputParseError(f"expected {dtype.__name__}, the model wrote {text!r}")
    found = m.group(0)
    if dtype is bool:
        return found.lower() in ("true", "yes"), found
    return dtype(found), found
