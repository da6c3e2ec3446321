"""DraftGuard: draft lengths follow acceptance, drafting pauses (longer each time) while
nothing is accepted, and a request whose drafts are always rejected verifies few of them."""

from __future__ import annotations

from test_speculative import _build, _fresh, _prompt, _req, _run

from radixrt.core import Req
from radixrt.scheduler.speculative import BaseDrafter
from radixrt.scheduler.speculative.guard import (
    FIRST_PAUSE,
    FIRST_TREE_PAUSE,
    MAX_PAUSE,
    TREE_MISSES,
    DraftGuard,
)


def test_length_follows_acceptance() -> None:
    g = DraftGuard(8)
    assert g.allowed() == 8
    g.record(8, 3)
    assert g.allowed() == 4  # one past the accepted
    g.record(4, 4)
    assert g.allowed() == 8  # accepted whole: doubled, within the limit
    g.record(2, 2)
    assert g.allowed() == 4


def _pauses(g: DraftGuard, misses: int) -> list[int]:
    """Run `misses` rejected verifications; the steps without drafting before each."""
    out = []
    for _ in range(misses):
        skipped = 0
        while (n := g.allowed()) == 0:
            skipped += 1
        g.record(n, 0)
        out.append(skipped)
    return out


def test_pauses_double_while_nothing_is_accepted_and_reset_on_acceptance() -> None:
    g = DraftGuard(5)
    skips = _pauses(g, 12)
    assert skips[:4] == [0, 0, FIRST_PAUSE, 2 * FIRST_PAUSE]
    assert max(skips) == MAX_PAUSE and skips[-1] == MAX_PAUSE
    assert sum(skips) > 10 * len(skips)  # most steps draft nothing
    while g.allowed() == 0:
        pass
    g.record(1, 1)  # accepted: drafting resumes at once, and the next misses pause shortly
    assert _pauses(g, 3) == [0, 0, FIRST_PAUSE]


class _Wrong(BaseDrafter):
    """Drafts a token the model never picks here."""

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        return [0] * max_tokens


def test_always_rejected_drafts_are_rarely_verified(tiny_llama_path) -> None:
    plain, s = _build(tiny_llama_path, 0), _build(tiny_llama_path, 5)
    s.speculation.drafter = _Wrong()
    _fresh(s)
    prompts = [_prompt(41, 30), _prompt(42, 30)]
    ref = _run(plain, [_req(f"r{i}", ids, 200) for i, ids in enumerate(prompts)])
    reqs = [_req(f"r{i}", ids, 200) for i, ids in enumerate(prompts)]
    assert _run(s, reqs) == ref
    assert all(0 not in r.output_ids and r.spec_accepted == 0 for r in reqs)
    drafted = [r.spec_drafted for r in reqs]
    assert all(0 < d < 0.1 * 200 for d in drafted), drafted  # without the guard: 5 per token


def test_trees_pause_while_no_side_branch_is_kept() -> None:
    g = DraftGuard(6)
    for _ in range(TREE_MISSES):
        assert g.trees_allowed()
        g.record_tree(False)
    allowed = [g.trees_allowed() for _ in range(FIRST_TREE_PAUSE + 1)]
    assert allowed == [False] * FIRST_TREE_PAUSE + [True]
    g.record_tree(False)  # one more miss right after: a pause twice as long
    assert sum(not g.trees_allowed() for _ in range(40)) == 2 * FIRST_TREE_PAUSE
    g.record_tree(True)
    assert g.trees_allowed() and g.tree_pause == 0
