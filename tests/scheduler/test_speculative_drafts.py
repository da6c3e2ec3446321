"""The lookup drafter's sources alone: the n-gram index over a request's own tokens and the
radix tree's continuation after a whole cached path (namespaces, pages, read-only)."""

from __future__ import annotations

import pytest
import torch

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.paged_allocator import PagedSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.tree_walk import continuation
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.speculative.draft_masks import DraftMasks
from radixrt.scheduler.speculative.drafter import LookupDrafter, can_speculate
from radixrt.scheduler.speculative.ngram import NgramIndex


def test_ngram_longest_suffix_latest_occurrence() -> None:
    idx = NgramIndex(4)
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 5, 2, 3]
    # [2, 3] last seen before the end at 5..6, followed by 7; [1, 2, 3]+ is not a suffix.
    assert idx.draft(seq, 3) == [7, 5, 2]
    assert idx.draft([*seq, 7], 2) == [5, 2]  # [2, 3, 7] now: the 3-gram wins
    assert NgramIndex(4).draft([1, 2, 3], 4) == []  # nothing seen twice
    assert NgramIndex(2).draft([], 4) == [] and NgramIndex(2).draft([5], 4) == []


def test_ngram_repeats_a_short_period() -> None:
    assert NgramIndex(4).draft([4, 5, 4, 5, 4, 5], 5) == [4, 5, 4, 5, 4]
    assert NgramIndex(3).draft([8, 8], 4) == [8, 8, 8, 8]


def test_ngram_index_is_incremental() -> None:
    idx = NgramIndex(3)
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    for n in range(1, len(seq) + 1):
        fresh = NgramIndex(3).draft(seq[:n], 4)
        assert idx.draft(seq[:n], 4) == fresh


def _radix(page_size: int = 1) -> RadixCache:
    alloc = TokenSlotAllocator(256) if page_size == 1 else PagedSlotAllocator(256, page_size)
    return RadixCache(alloc, page_size)


def _insert(cache: RadixCache, key: list[int], extra_key: str | None = None) -> None:
    slots = cache.allocator.alloc(len(key))
    n = cache.insert(key, slots, extra_key)
    cache.allocator.free(slots[:n])


@pytest.mark.parametrize("page_size", [1, 4])
def test_continuation_after_a_whole_cached_path(page_size: int) -> None:
    cache = _radix(page_size)
    _insert(cache, list(range(10, 26)), "a")
    nodes, sizes = cache.num_nodes, (cache.evictable_size, cache.protected_size)
    assert continuation(cache, list(range(10, 15)), "a", 3) == [15, 16, 17]
    assert continuation(cache, list(range(10, 23)), "a", 8) == [23, 24, 25]
    assert continuation(cache, list(range(10, 26)), "a", 4) == []  # nothing after it
    assert continuation(cache, [10, 11, 99], "a", 4) == []  # not a cached path
    assert continuation(cache, list(range(10, 15)), "b", 4) == []  # another namespace
    assert continuation(cache, list(range(10, 15)), None, 4) == []
    assert (cache.num_nodes, (cache.evictable_size, cache.protected_size)) == (nodes, sizes)
    cache.check_integrity()


def test_continuation_follows_the_most_recent_branch() -> None:
    cache = _radix()
    _insert(cache, [1, 2, 3, 4, 5, 6])
    _insert(cache, [1, 2, 3, 7, 8, 9])
    assert continuation(cache, [1, 2], None, 4) == [3, 7, 8, 9]
    cache.match_prefix([1, 2, 3, 4, 5])  # uses the first branch again
    assert continuation(cache, [1, 2], None, 4) == [3, 4, 5, 6]
    assert continuation(NoPrefixCache(TokenSlotAllocator(8)), [1, 2], None, 4) == []


def test_drafter_prefers_the_tree_then_own_tokens() -> None:
    cache = _radix()
    _insert(cache, [5, 6, 7, 8, 9, 10])
    req = Req("r", [5, 6, 7], SamplingParams(temperature=0), output_ids=[8])
    drafter = LookupDrafter(cache, 4)
    assert drafter.propose(req, 3) == [9, 10]
    req = Req("r", [1, 2, 3, 1, 2], SamplingParams(temperature=0))
    assert drafter.propose(req, 3) == [3, 1, 2]


def test_who_is_speculated() -> None:
    def req(**kw) -> Req:
        return Req("r", [1, 2], SamplingParams(**kw), output_ids=[3])

    assert can_speculate(req(temperature=0)) and can_speculate(req(top_k=1))
    assert can_speculate(req(temperature=0.7, top_p=0.9, seed=3))
    assert can_speculate(req(temperature=0, return_logprob=True, top_logprobs_num=3))
    assert can_speculate(req(temperature=0, frequency_penalty=0.5, presence_penalty=0.2))
    assert can_speculate(req(temperature=0.5, repetition_penalty=1.2))
    assert can_speculate(req(temperature=0, min_new_tokens=4))
    assert not can_speculate(req(temperature=0, regex="a+"))


class _OneSequence:
    """A grammar queue whose grammar allows one token sequence (`draft_masks` as
    GrammarQueue's: 1 + n rows for the first n drafted tokens it allows)."""

    def __init__(self, allowed: list[int]) -> None:
        self.allowed = allowed
        self.walks = 0

    def draft_masks(self, req: Req, draft: list[int], stop_ids: set[int]) -> torch.Tensor:
        self.walks += 1
        n = 0
        while n < min(len(draft), len(self.allowed)) and draft[n] == self.allowed[n]:
            n += 1
        return torch.full((1 + n, 2), n, dtype=torch.int32)


def test_a_constrained_draft_cut_short_takes_the_chain_its_grammar_allows() -> None:
    """A JSON key followed by another key in the output so far (the latest occurrence) and by
    the one the grammar wants in an earlier record of the prompt: the drafter offers both,
    the masks keep the chain the grammar allows furthest, and its masks."""
    key, sep = [40, 41], [42]
    prompt = [1, *key, 7, 8, 9, *sep, 2, *key, 7, 8, 9, *sep, 3]
    req = Req("r", prompt, SamplingParams(temperature=0, regex="x"))
    req.output_ids = [4, *key, 5, 6, *sep, *key]  # the latest occurrence goes on with 5, 6
    req.grammar = object()  # constrained: the index keeps other occurrences
    drafter = LookupDrafter(_radix(), 4)
    assert drafter.propose(req, 4) == [5, 6, *sep, key[0]]
    others = drafter.alternatives(req, 4, 3)
    assert [7, 8, 9, *sep] in others
    grammar = _OneSequence([7, 8, 9, *sep, 3])
    masks = DraftMasks(grammar, eos_token_ids=[0])  # type: ignore[arg-type]
    draft = masks.constrain(req, [5, 6, *sep, key[0]], lambda: others)
    assert draft == [7, 8, 9, *sep]
    req.draft_ids = draft
    rows = masks.vocab_mask([req], 1 + len(draft))
    assert rows is not None and rows[:, 0].tolist() == [4] * 5  # that chain's masks
    # A draft the grammar allows whole is kept without walking the others.
    walks = grammar.walks
    assert masks.constrain(req, [7, 8], lambda: pytest.fail("not needed")) == [7, 8]
    req.draft_ids = []
    assert grammar.walks == walks + 1
