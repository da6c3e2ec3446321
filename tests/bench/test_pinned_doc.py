"""The pinned-document benchmark's arithmetic, without a server: the plan, the summaries and
the ratios."""

from __future__ import annotations

import math

import pytest

from benchmarks.scenarios import pinned_doc
from benchmarks.scenarios.pinned_doc import Plan, Query, compare, summarize


@pytest.mark.parametrize(
    "plan",
    [Plan(8192, 4000, 512, 3.0), Plan(**pinned_doc.QUICK), Plan(1000, 900, 300, 2.0)],
)
def test_the_gap_between_queries_overfills_the_room_beside_the_document(plan: Plan) -> None:
    room = plan.pool_tokens - plan.doc_tokens
    assert plan.every * plan.flood_tokens >= pinned_doc.GAP_MARGIN * room
    assert (plan.every - 1) * plan.flood_tokens < pinned_doc.GAP_MARGIN * room or plan.every == 1
    assert plan.num_flood * plan.flood_tokens >= plan.flood_x * plan.pool_tokens


def test_jobs_put_a_query_after_every_few_floods() -> None:
    plan = Plan(8192, 4000, 512, 3.0)
    assert (plan.every, plan.num_flood) == (11, 48)
    jobs = plan.jobs()
    floods = [i for kind, i in jobs if kind == "flood"]
    docs = [(pos, j) for pos, (kind, j) in enumerate(jobs) if kind == "doc"]
    assert floods == list(range(48))
    assert [j for _, j in docs] == [0, 1, 2, 3]  # 48 // 11 queries, numbered in order
    assert [pos for pos, _ in docs] == [11, 23, 35, 47]  # each after 11 more floods


def test_summaries_and_ratios() -> None:
    pinned = [Query(1000, 990, 0.2), Query(1010, 1000, 0.4), Query(1020, 1010, 0.3)]
    unpinned = [Query(1000, 0, 2.0), Query(1010, 10, 3.0)]
    p, u = summarize(pinned), summarize(unpinned)
    assert p == {"queries": 3, "hit_rate": 3000 / 3030, "median_ttft_s": 0.3}
    assert u["hit_rate"] == pytest.approx(10 / 2010) and u["median_ttft_s"] == 2.5
    ratios = compare(p, u)
    assert ratios["ttft_speedup"] == pytest.approx(2.5 / 0.3)
    assert ratios["hit_rate_ratio"] == pytest.approx((3000 / 3030) / (10 / 2010))
    assert compare(p, summarize([Query(10, 0, 1.0)]))["hit_rate_ratio"] == math.inf
    assert summarize([]) == {"queries": 0, "hit_rate": 0.0, "median_ttft_s": 0.0}


def test_prompts_share_nothing_but_their_first_tokens() -> None:
    doc = pinned_doc.document(4000)
    assert 3500 < len(doc.split()) * 14 / 7 < 4500  # ~14 tokens a 7-word sentence
    a, b = pinned_doc.flood_prompt("U", 1, 400), pinned_doc.flood_prompt("U", 2, 400)
    assert a != b and a[0] != b[0] and not a.startswith(doc[:3])
    assert pinned_doc.question(1) != pinned_doc.question(2)
