"""Trusted lookup drafts: a draft whose source matched several of the request's last tokens
runs past its guard's shortened length (or pause); a weak match stays within the guard."""

from __future__ import annotations

from test_speculative import _build, _prompt, _req

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.speculative.drafter import TRUSTED_MATCH, LookupDrafter
from radixrt.scheduler.speculative.guard import DraftGuard
from radixrt.scheduler.speculative.ngram import NgramIndex


def test_ngram_reports_the_matched_length() -> None:
    idx = NgramIndex(4)
    assert idx.draft([1, 2, 3, 9, 1, 2, 3], 3) == [9, 1, 2] and idx.matched == 3
    assert idx.draft([1, 2, 3, 9, 1, 2, 3, 5, 3], 2) == [5, 3] and idx.matched == 1
    assert idx.draft([1, 2, 3, 9, 1, 2, 3, 5, 3, 8], 2) == [] and idx.matched == 0


def _own_req(tail: list[int]) -> Req:
    doc = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    return Req("r", [*doc, 30, 31], SamplingParams(temperature=0), output_ids=tail)


def test_trim_keeps_a_long_match_whole_and_cuts_a_short_one() -> None:
    drafter = LookupDrafter(NoPrefixCache(TokenSlotAllocator(8)), 4)
    long = _own_req([12, 13, 14])  # the document's 12 13 14: a 3-gram match
    draft = drafter.propose(long, 5)
    assert draft == [15, 16, 17, 18, 19] and TRUSTED_MATCH <= 3
    assert drafter.trim(long, draft, 1) == draft
    short = _own_req([40, 14])  # only 14 seen before: a 1-gram match
    draft = drafter.propose(short, 5)
    assert draft == [15, 16, 17, 18, 19]
    assert drafter.trim(short, draft, 1) == [15] and drafter.trim(short, draft, 0) == []


def _planned(s, req: Req, guard: DraftGuard) -> list[int]:
    req.draft_guard = guard
    req.extend_len = 1
    s.speculation.plan([req], 64)
    drafted, req.draft_ids, req.extend_len = req.draft_ids, [], 1
    return drafted


def test_plan_trusts_long_matches_past_a_short_or_paused_guard(tiny_llama_path) -> None:
    s = _build(tiny_llama_path, 6)
    doc = _prompt(7, 20)
    strong = _req("a", doc + doc[:5], 40)  # its last 5 tokens repeat the start: 6 drafted
    assert _planned(s, strong, DraftGuard(6, length=1)) == doc[5:11]
    assert _planned(s, strong, DraftGuard(6, length=2, wait=3)) == doc[5:11]
    weak = _req("b", doc + [doc[4]], 40)  # a 1-gram match: the guard's length
    assert _planned(s, weak, DraftGuard(6, length=2)) == doc[5:7]
    assert _planned(s, weak, DraftGuard(6, length=2, wait=3)) == []  # paused
