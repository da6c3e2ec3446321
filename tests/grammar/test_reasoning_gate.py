"""The reasoning gate: free reasoning up to the end token, then the grammar from its start;
the thinking budget and the output's token budget force the end token in time; rollback
across the phases; a gate over free text caps only the reasoning."""

from __future__ import annotations

import json
import random

import pytest
import torch

from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarSpec
from radixrt.grammar.reasoning_gate import ReasoningGate

VOCAB = 49152
WORDS = (VOCAB + 31) // 32
EOS = 2
START, END = 100, 101  # two ordinary tokens standing for <think> and </think>
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}


def _inner(backend: BaseGrammarBackend) -> BaseGrammarMatcher:
    return backend.new_matcher(backend.compile(GrammarSpec("json_schema", json.dumps(SCHEMA))))


def _allowed(matcher: BaseGrammarMatcher, budget: int | None = None) -> set[int]:
    row = torch.empty(1, WORDS, dtype=torch.int32)
    matcher.fill_mask(row, 0, budget)
    bits = [(int(w) & 0xFFFFFFFF) for w in row[0]]
    return {i * 32 + b for i, w in enumerate(bits) if w for b in range(32) if (w >> b) & 1}


def _count(matcher: BaseGrammarMatcher, budget: int | None = None) -> int:
    row = torch.empty(1, WORDS, dtype=torch.int32)
    matcher.fill_mask(row, 0, budget)
    return sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in row[0])


def test_reasoning_is_free_then_the_grammar_holds(backend, tokenizer) -> None:
    gate = ReasoningGate(_inner(backend), END, stop_ids=(EOS,))
    assert _count(gate) == WORDS * 32 - 1  # everything but the stop token
    assert EOS not in _allowed(gate) and END in _allowed(gate)
    words = tokenizer.encode(" some thoughts { not json", add_special_tokens=False)
    for t in words:
        assert gate.accept(t) and not gate.is_accepting()
    assert gate.thought == len(words)
    assert gate.accept(END)
    fresh = _inner(backend)
    assert _allowed(gate) == _allowed(fresh)  # the grammar from its start
    for t in tokenizer.encode('{"city": "Oslo"}', add_special_tokens=False):
        assert t in _allowed(gate)
        assert gate.accept(t)
    assert gate.is_accepting() and EOS in _allowed(gate)


def test_the_thinking_budget_forces_the_end(backend) -> None:
    gate = ReasoningGate(_inner(backend), END, thinking_budget=3, stop_ids=(EOS,))
    for t in (7, 8, 9):
        assert _count(gate) > 1
        assert gate.accept(t)
    assert _allowed(gate) == {END}
    free = ReasoningGate(None, END, thinking_budget=0)
    assert _allowed(free) == {END} and not free.constrains
    assert free.accept(END) and _count(free) == WORDS * 32


def test_the_token_budget_leaves_room_for_the_answer(backend) -> None:
    inner = _inner(backend)
    gate = ReasoningGate(inner, END, stop_ids=(EOS,))
    if not gate.bounds_length:
        pytest.skip(f"{backend.name} does not bound lengths")
    need = inner.min_tokens()
    assert need is not None and gate.min_tokens() == need + 1
    assert _allowed(gate, budget=need + 1) == {END}  # the end, then the shortest answer
    assert _count(gate, budget=need + 2) > 1
    assert gate.accept(END) and gate.min_tokens() == need


def test_an_output_that_may_open_its_reasoning(backend, tokenizer) -> None:
    gate = ReasoningGate(_inner(backend), END, start_id=START, stop_ids=(EOS,))
    assert _allowed(gate) == _allowed(_inner(backend)) | {START}
    assert gate.accept(START) and gate.thought == 0
    assert EOS not in _allowed(gate) and gate.accept(5) and gate.accept(END)
    # Not opened: the answer at once, the start token then the grammar's to judge.
    answer = ReasoningGate(_inner(backend), END, start_id=START, stop_ids=(EOS,))
    brace = tokenizer.encode("{", add_special_tokens=False)[0]
    assert answer.accept(brace) and START not in _allowed(answer)
    none = ReasoningGate(_inner(backend), END, start_id=START, thinking_budget=0)
    assert START not in _allowed(none)


def test_rollback_across_the_phases(backend, tokenizer) -> None:
    rng = random.Random(0)
    answer = tokenizer.encode('{"city": "Rome"}', add_special_tokens=False)
    ids = [START, 11, 12, 13, END, *answer]
    gate = ReasoningGate(_inner(backend), END, start_id=START, stop_ids=(EOS,))
    masks = []
    for t in ids:
        masks.append(_allowed(gate))
        assert gate.accept(t)
    masks.append(_allowed(gate))
    assert gate.is_accepting()
    for _ in range(8):
        back = rng.randint(1, len(ids))
        gate.rollback(back)
        at = len(ids) - back
        assert _allowed(gate) == masks[at]
        for t in ids[at:]:
            assert gate.accept(t)
        assert _allowed(gate) == masks[-1] and gate.is_accepting()
