"""The JSON of `GET /dashboard/data`: the scheduler's figures (InfoReplyMsg), its tree summary
and misses (CacheSummaryReplyMsg) with their token ids decoded, and the recorder's history.

Runs on the tokenizer thread (it decodes). Shape, every figure also a Prometheus series
(server/metrics.py):

| key        | what                                                                        |
|------------|-----------------------------------------------------------------------------|
| `pool`     | tokens `free`, `evictable`, `locked`, `pinned`, `held` (by running requests: |
|            | the rest), `total` (they add up to it), `num_pins`                          |
| `queue`    | `running`, `waiting`, `in_flight` (HTTP side)                               |
| `counters` | scheduler token counters, `cache_hit_rate` since start, requests by finish, |
|            | speculation's drafted / accepted tokens, acceptance rate, tokens per step   |
| `recent`   | the recorder's last minute: hit rate, TTFT quantiles, `spec` (speculation's |
|            | acceptance rate, tokens per step, per-request speed-ups by bucket; or None) |
| `series`   | the recorder's points (`bucket_s` apart)                                    |
| `tree`     | `num_nodes`, `walked_nodes`, `truncated`, `subtrees` (rows, `text` decoded) |
| `misses`   | `total`, `by_cause`, `recent` (newest first, `explanation` as /v1/cache/explain) |
"""

from __future__ import annotations

import time
from typing import Any

from radixrt.core.messages import CacheSummaryReplyMsg, InfoReplyMsg, MissMsg, SubtreeMsg
from radixrt.serve.http.dashboard.recorder import BUCKET_S, DashboardRecorder
from radixrt.serve.http.explain import render_explanation
from radixrt.serve.http.metrics_spec import spec_rates

TEXT_CHARS = 60  # decoded characters shown of each subtree's first tokens
_NS_SEP = "\x1f"  # between a namespace's tenant and its salt (radixrt/serve/web/keys.py)


def dashboard_data(
    info: InfoReplyMsg,
    summary: CacheSummaryReplyMsg,
    recorder: DashboardRecorder,
    tokenizer: Any,
    model_name: str,
    in_flight: int,
) -> dict[str, Any]:
    """Everything the page shows, as one JSON object."""
    return {
        "time": time.time(),
        "model": model_name,
        "pool": pool_figures(info),
        "queue": {
            "running": info.num_running_reqs,
            "waiting": info.num_queued_reqs,
            "in_flight": in_flight,
        },
        "counters": {
            "cache_hit_rate": info.cache_hit_rate,
            "prompt_tokens": info.prompt_tokens,
            "cached_tokens": info.cached_tokens,
            "generated_tokens": info.generated_tokens,
            "spec_drafted_tokens": info.spec_drafted_tokens,
            "spec_accepted_tokens": info.spec_accepted_tokens,
            "spec_acceptance_rate": spec_rates(info)[0],
            "spec_tokens_per_step": spec_rates(info)[1],
            "requests": sum(recorder.requests_by_finish.values()),
            "requests_by_finish": dict(recorder.requests_by_finish),
        },
        "recent": recorder.recent(),
        "series": {"bucket_s": BUCKET_S, "points": recorder.series()},
        "tree": {
            "num_nodes": summary.num_nodes,
            "walked_nodes": summary.walked_nodes,
            "truncated": summary.truncated,
            "subtrees": [_subtree(row, tokenizer) for row in summary.subtrees],
        },
        "misses": {
            "total": summary.num_misses,
            "by_cause": dict(summary.misses_by_cause),
            "recent": [_miss(m, tokenizer) for m in summary.misses],
        },
    }


def pool_figures(info: InfoReplyMsg) -> dict[str, int]:
    """The pool by state; `held` (the running requests' own slots) is what the tree and the
    free list do not account for, so the five always add up to `total`."""
    states = {
        "free": info.free_tokens,
        "evictable": info.evictable_tokens,
        "locked": info.protected_tokens,
        "pinned": info.pinned_tokens,
    }
    held = max(0, info.max_total_tokens - sum(states.values()))
    return {**states, "held": held, "total": info.max_total_tokens, "num_pins": info.num_pins}


def _namespace(extra_key: str | None) -> str:
    return "" if extra_key is None else extra_key.replace(_NS_SEP, "/")


def _subtree(row: SubtreeMsg, tokenizer: Any) -> dict[str, Any]:
    text = tokenizer.decode(row.prefix_ids, skip_special_tokens=False)
    return {
        "namespace": _namespace(row.extra_key),
        "replica": row.replica,
        "depth": row.depth,
        "offset": row.offset,
        "tokens": row.tokens,
        "nodes": row.nodes,
        "hits": row.hits,
        "idle_s": row.idle_s,
        "pinned_tokens": row.pinned_tokens,
        "locked_tokens": row.locked_tokens,
        "text": text[:TEXT_CHARS],
    }


def _miss(miss: MissMsg, tokenizer: Any) -> dict[str, Any]:
    return {
        "at": miss.at,
        "namespace": _namespace(miss.extra_key),
        "replica": miss.replica,
        "prompt_tokens": miss.prompt_tokens,
        "cached_tokens": miss.cached_tokens,
        "explanation": render_explanation(miss, miss.context_ids, tokenizer, miss.context_start),
    }
