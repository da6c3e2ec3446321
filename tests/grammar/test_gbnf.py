"""`ebnf` specs in GBNF (`root ::= ...`, llama.cpp's, xgrammar's and SGLang's) taken by the
llguidance backend as Lark after llguidance's converter; Lark as it is; a GBNF grammar of
too many rules (the converter's time grows with their square) refused before it runs."""

from __future__ import annotations

import pytest

pytest.importorskip("llguidance")

from radixrt.grammar.llguidance_backend import MAX_GBNF_RULES, as_lark  # noqa: E402


def test_gbnf_is_converted_and_lark_kept() -> None:
    lark = as_lark('root ::= "id-" digit digit\ndigit ::= [0-9]')
    assert "start:" in lark and "::=" not in lark
    for kept in ('start: "x"', '?start: "a ::= b"', '%llguidance {}\nstart: "y"'):
        assert as_lark(kept) == kept


def test_too_many_gbnf_rules_are_refused() -> None:
    rules = "\n".join(f'r{i} ::= r{i + 1} "x"' for i in range(MAX_GBNF_RULES + 1))
    with pytest.raises(ValueError, match=f"at most {MAX_GBNF_RULES}"):
        as_lark("root ::= r0\n" + rules)
