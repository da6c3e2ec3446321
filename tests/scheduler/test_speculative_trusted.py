"""Lookup drafts: a draft whose source matched several of the request's last tokens is
trusted (its acceptance counted apart from weak matches'); both kinds are drafted whole past
the guard's shortened length or pause, and the step's allotment cuts each by its kind's
acceptance."""

from __future__ import annotations

from test_speculative import _build, _prompt, _req

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.speculative.acceptance import Acceptance
from radixrt.scheduler.speculative.drafter import TRUSTED_MATCH, LookupDrafter
from radixrt.scheduler.speculative.guard import DraftGuard
from radixrt.scheduler.speculative.ngram import NgramIndex
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost


def test_ngram_reports_the_matched_length() -> None:
    idx = NgramIndex(4)
    assert idx.draft([1, 2, 3, 9, 1, 2, 3], 3) == [9, 1, 2] and idx.matched == 3
    assert idx.draft([1, 2, 3, 9, 1, 2, 3, 5, 3], 2) == [5, 3] and idx.matched == 1
    assert idx.draft([1, 2, 3, 9, 1, 2, 3, 5, 3, 8], 2) == [] and idx.matched == 0


def _own_req(tail: list[int]) -> Req:
    doc = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    return Req("r", [*doc, 30, 31], SamplingParams(temperature=0), output_ids=tail)


def test_trusted_tells_a_long_match_from_a_short_one_and_both_are_kept_whole() -> None:
    drafter = LookupDrafter(NoPrefixCache(TokenSlotAllocator(8)), 4)
    long = _own_req([12, 13, 14])  # the document's 12 13 14: a 3-gram match
    draft = drafter.propose(long, 5)
    assert draft == [15, 16, 17, 18, 19] and TRUSTED_MATCH <= 3 and drafter.trusted(long)
    assert drafter.trim(long, draft, 1) == draft
    short = _own_req([40, 14])  # only 14 seen before: a 1-gram match
    draft = drafter.propose(short, 5)
    assert draft == [15, 16, 17, 18, 19] and not drafter.trusted(short)
    assert drafter.trim(short, draft, 0) == draft  # the step's allotment cuts it, not the guard


def _planned(s, req: Req, guard: DraftGuard) -> list[int]:
    req.draft_guard = guard
    req.extend_len = 1
    s.speculation.plan([req], 64)
    drafted, req.draft_ids, req.extend_len = req.draft_ids, [], 1
    return drafted


def test_plan_cuts_lookup_drafts_by_their_kind_of_acceptance_not_the_guard(
    tiny_llama_path,
) -> None:
    s = _build(tiny_llama_path, 6)
    s.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])  # a row costs 1/13 of a pass
    doc = _prompt(7, 20)
    strong = _req("a", doc + doc[:5], 40)  # its last 5 tokens repeat the start: 6 drafted
    assert _planned(s, strong, DraftGuard(6, length=1)) == doc[5:11]
    assert _planned(s, strong, DraftGuard(6, length=2, wait=3)) == doc[5:11]
    weak = _req("b", doc + [doc[4]], 40)  # a 1-gram match, drafted while the guard pauses
    got = _planned(s, weak, DraftGuard(6, length=1, wait=3))
    assert 1 < len(got) < 6 and got == doc[5 : 5 + len(got)]  # an even chance a token: fewer
    poor = DraftGuard(6, rates=(Acceptance(0.0, 40.0), Acceptance()))  # weak ones never kept
    assert _planned(s, weak, poor) == []
    assert _planned(s, strong, poor) == doc[5:11]  # a long match's kind is counted apart
