"""Matchers step back (`rollback`), and GrammarState.along gives the masks a decode step
would use along a draft, cut where the grammar refuses it, leaving the matcher where it was."""

from __future__ import annotations

import json

import torch

from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarSpec
from radixrt.scheduler.grammar_queue import GrammarState, GrammarStats

VOCAB = 49152
WORDS = (VOCAB + 31) // 32
EOS = 2
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}},
    "required": ["city", "n"],
    "additionalProperties": False,
}


def _matcher(backend: BaseGrammarBackend) -> BaseGrammarMatcher:
    return backend.new_matcher(backend.compile(GrammarSpec("json_schema", json.dumps(SCHEMA))))


def _mask(matcher: BaseGrammarMatcher, budget: int | None = None) -> torch.Tensor:
    row = torch.empty(1, WORDS, dtype=torch.int32)
    matcher.fill_mask(row, 0, budget)
    return row[0]


def test_rollback_returns_to_the_same_masks(backend, tokenizer) -> None:
    matcher = _matcher(backend)
    assert matcher.can_rollback
    ids = tokenizer.encode('{"city": "Paris", "n": 42}', add_special_tokens=False)
    masks = []
    for t in ids:
        masks.append(_mask(matcher))
        assert matcher.accept(t)
    assert matcher.is_accepting()
    for back in (1, 3, len(ids) - 2):
        matcher.rollback(back)
        assert torch.equal(_mask(matcher), masks[len(ids) - back])
        for t in ids[len(ids) - back :]:
            assert matcher.accept(t)
    matcher.rollback(len(ids))
    assert torch.equal(_mask(matcher), masks[0]) and not matcher.is_accepting()


def test_along_a_draft_gives_each_positions_mask_and_cuts_at_a_refusal(backend, tokenizer):
    good = tokenizer.encode('{"city": "Rome", "n": 7}', add_special_tokens=False)
    bad = tokenizer.encode(" nonsense", add_special_tokens=False)
    state = GrammarState(_matcher(backend), WORDS, GrammarStats())
    state.accept(good[0])
    draft = good[1:5] + bad + good[5:]
    budget = 40 if backend.name != "llguidance" else None
    masks = state.along(draft, budget, {EOS})
    assert masks.shape == (1 + 4, WORDS)  # cut at the first token the grammar refuses
    ref = _matcher(backend)  # a fresh matcher, walked one token at a time
    assert ref.accept(good[0])
    for j in range(5):
        expect = _mask(ref, None if budget is None else budget - j)
        assert torch.equal(masks[j], expect), j
        if j < 4:
            assert ref.accept(draft[j])
    # The state is where it was: the whole answer still goes through.
    assert torch.equal(state.mask(budget), masks[0])
    assert all(state.accept(t) for t in good[1:]) and state.matcher.is_accepting()
    # Stop tokens are never drafted into a grammar.
    assert state.along([EOS, good[0]], None, {EOS}).shape[0] == 1
