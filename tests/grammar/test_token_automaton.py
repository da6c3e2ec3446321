"""Distances to the end on outlines' token automaton and the auto backend's routing, on
SmolLM2's tokenizer; no model runs here.

The budget property: walking the automaton with random tokens from budget masks always ends
complete within the budget when the start's distance fits it, and a budget one below that
distance leaves the walk no way to finish."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch

from radixrt.grammar import create_grammar_backend
from radixrt.grammar.base import UNREACHABLE, BaseGrammarMatcher, GrammarSpec
from radixrt.grammar.regex_size import MAX_COUNTED, counted_size, dfa_states
from radixrt.grammar.token_automaton import TokenAutomaton

VOCAB = 49152
EOS = 2
TOWN = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "big": {"type": "boolean"}},
    "required": ["name", "big"],
}
SPECS = [
    GrammarSpec("regex", r"[0-9]{3}"),
    GrammarSpec("regex", r"[-+]?[0-9]+(\.[0-9]+)?"),
    GrammarSpec("regex", r"[a-z]+@[a-z]+\.(com|org)"),
    GrammarSpec("json_schema", json.dumps(TOWN)),
]


@pytest.fixture(scope="module")
def outlines(tokenizer: Any) -> Any:
    return create_grammar_backend("outlines", tokenizer, VOCAB, [EOS])


@pytest.fixture(scope="module")
def auto(tokenizer: Any) -> Any:
    return create_grammar_backend("auto", tokenizer, VOCAB, [EOS])


def _allowed(matcher: BaseGrammarMatcher, budget: int | None) -> list[int]:
    mask = torch.zeros(1, (VOCAB + 31) // 32, dtype=torch.int32)
    matcher.fill_mask(mask, 0, budget)
    bits = (mask[0, :, None] >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten().nonzero()[:, 0].tolist()


def _walk(matcher: BaseGrammarMatcher, budget: int, rng: random.Random) -> tuple[int, bool]:
    """Random allowed tokens under budget masks: (tokens taken, whether it ended complete)."""
    for used in range(budget):
        allowed = _allowed(matcher, budget - used)
        if not allowed:
            return used, False
        token = rng.choice(allowed)
        if token == EOS:
            return used, matcher.is_accepting()
        assert matcher.accept(token)
    return budget, matcher.is_accepting()


def test_minimum_lengths_are_exact_on_single_token_pieces(outlines) -> None:
    """SmolLM2 writes every digit as its own token: three digits take exactly three."""
    for regex, want in [(r"[0-9]{3}", 3), (r"[0-9]+", 1), (r"(ab)?", 0)]:
        matcher = outlines.new_matcher(outlines.compile(GrammarSpec("regex", regex)))
        assert matcher.bounds_length and matcher.min_tokens() == want, regex


@pytest.mark.parametrize(
    "regex, text, more",
    [(r"[0-9]+(\.[0-9]+)?", "12", "."), (r"a|abc", "a", "bc"), (r"[0-9]+(,[0-9]+)?", "7", ",")],
)
def test_where_a_regex_could_end_it_may_also_go_on(outlines, tokenizer, regex, text, more) -> None:
    """outlines-core's own index refuses these continuations; the sentinel keeps them."""
    matcher = outlines.new_matcher(outlines.compile(GrammarSpec("regex", regex)))
    assert all(matcher.accept(t) for t in tokenizer.encode(text))
    assert matcher.is_accepting()
    allowed = _allowed(matcher, None)
    assert EOS in allowed and tokenizer.encode(more)[0] in allowed


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.text[:20])
def test_walks_under_budget_masks_always_end_complete(outlines, spec) -> None:
    compiled = outlines.compile(spec)
    need = outlines.new_matcher(compiled).min_tokens()
    assert 0 < need < UNREACHABLE
    rng = random.Random(0)
    for budget in [need, need + 1, need + 3, 2 * need]:
        for _ in range(12):
            used, complete = _walk(outlines.new_matcher(compiled), budget, rng)
            assert complete and used <= budget, (spec, budget, used)
    # One token short: every walk runs out (the minimum is a lower bound too).
    for _ in range(12):
        assert not _walk(outlines.new_matcher(compiled), need - 1, rng)[1]


def test_a_regex_that_needs_a_nul_byte_cannot_be_written(outlines) -> None:
    """NUL is the end sentinel, and the model's NUL tokens are left out: "a" alone is not a
    complete output of `a\x00`, and nothing completes it."""
    matcher = outlines.new_matcher(outlines.compile(GrammarSpec("regex", r"a\x00")))
    assert matcher.min_tokens() == UNREACHABLE
    assert not matcher.is_accepting()


def test_a_loose_budget_does_not_change_the_mask(outlines, tokenizer) -> None:
    """After "a" of an e-mail address, 4 tokens left leave no room for more letters."""
    matcher = outlines.new_matcher(outlines.compile(SPECS[2]))
    assert matcher.accept(tokenizer.encode("a")[0]) and matcher.min_tokens() == 4
    assert _allowed(matcher, 100) == _allowed(matcher, None)
    tight = _allowed(matcher, 4)
    assert 0 < len(tight) < len(_allowed(matcher, None))
    assert tokenizer.encode("@")[0] in tight and tokenizer.encode("b")[0] not in tight


def test_an_unreachable_end_has_no_distance() -> None:
    """A state with edges only into a dead end (no final state reachable) is UNREACHABLE."""

    class _Index:  # 2 may end (the sentinel, 64, leads to 3)
        def get_transitions(self) -> dict[int, dict[int, int]]:
            return {0: {5: 1, 6: 2}, 1: {7: 1}, 2: {64: 3}, 3: {EOS: 3}}

        def get_initial_state(self) -> int:
            return 0

        def get_final_states(self) -> set[int]:
            return {3}

    automaton = TokenAutomaton(_Index(), 64, sentinel=64)
    assert automaton.distance(0) == 1 and automaton.distance(1) == UNREACHABLE
    assert automaton.accepting.tolist() == [False, False, True, False]
    assert automaton.mask(0, 1)[0] == 1 << 6  # token 5 leads nowhere: only 6 is kept
    assert automaton.mask(0, None)[0] == (1 << 5) | (1 << 6)
    assert automaton.next_state(0, 6) == 2 and automaton.next_state(0, 7) is None


@pytest.mark.parametrize(
    "spec, bounded",
    [
        (GrammarSpec("regex", r"[0-9]{3}-[a-z]+"), True),
        (GrammarSpec("json_schema", json.dumps(TOWN)), True),
        (GrammarSpec("json_schema", json.dumps({"type": "integer", "minimum": 3})), True),
        (GrammarSpec("json_schema", json.dumps({"type": "integer", "multipleOf": 3})), False),
        (GrammarSpec("json_schema", json.dumps({"type": "string", "format": "email"})), False),
        (GrammarSpec("json_schema", json.dumps({"type": "string", "maxLength": 200})), False),
        (GrammarSpec("regex", r"[a-z]{1,200}"), False),
        (GrammarSpec("regex", r"[ab]*a[ab]{6}"), True),
        (GrammarSpec("regex", r"[ab]*a[ab]{20}"), False),  # 2**20 states: never built
        (GrammarSpec("regex", r"(?=a)a"), False),  # outlines has no lookahead: llguidance
        (GrammarSpec("ebnf", 'start: "yes" | "no"'), False),
    ],
    ids=lambda x: x.text[:24] if isinstance(x, GrammarSpec) else str(x),
)
def test_auto_bounds_lengths_only_where_outlines_enforces_the_whole_spec(
    auto, spec, bounded
) -> None:
    try:
        compiled = auto.compile(spec)
    except Exception as e:  # llguidance refuses it too: it must say why, not crash
        assert not bounded and "invalid" in str(e)
        return
    assert auto.new_matcher(compiled).bounds_length is bounded


@pytest.mark.parametrize(
    "regex, states",
    [
        (r"[ab]*a[ab]{4}", 33),  # 2 ** (n + 1) + 1: one more count doubles it
        (r"[ab]*a[ab]{5}", 65),
        (r"[ab]*a[ab]{30}", 100),  # capped: counting stops at the cap
        (r"[-+]?[0-9]+(\.[0-9]+)?", 7),
        (r"(a|bc)+x{2,3}", 10),
        (r"(?=a)a", None),
        (r"(a)\1", None),
        (r"[", None),
    ],
)
def test_dfa_states_counts_up_to_the_cap(regex, states) -> None:
    assert dfa_states(regex, 100) == states


def test_counted_size_adds_the_bounds_of_counted_repetitions() -> None:
    assert counted_size(r"[a-z]{2,8}-[0-9]{3}x{4,}\{99\}") == 8 + 3 + 4
    assert counted_size("a" * 10) == 0
    assert counted_size(f"[a-z]{{0,{MAX_COUNTED + 1}}}") > MAX_COUNTED
