"""Prometheus metrics of the HTTP process; `NoMetrics` is the null object when they are off.

What the scheduler reports (InfoReplyMsg: pool, queues, pins; CacheSummaryReplyMsg: the tree's
size and the misses) and what the HTTP process holds (the named cache handles of
`CacheRegistry`, given to `render` by the app) are read at each scrape; the token and latency
figures are counted as requests finish. Every figure of the dashboard (server/dashboard/) is
one of these series; docs/grafana-dashboard.json charts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from radixrt.core.messages import CacheSummaryReplyMsg, InfoReplyMsg
from radixrt.serve.http.metrics_gateway import GatewayCollector
from radixrt.serve.http.metrics_spec import SpecCollector, SpecRequestHistograms
from radixrt.serve.http.metrics_steps import StepTimesCollector
from radixrt.serve.http.metrics_tiers import TierCollector
from radixrt.serve.results.state import ReqOutput
from radixrt.serve.web.responses import PROMETHEUS_CONTENT_TYPE as CONTENT_TYPE

__all__ = [
    "CONTENT_TYPE",
    "HandleStats",
    "Metrics",
    "NoMetrics",
    "RequestObserver",
    "handle_figures",
]

_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_E2E_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class RequestObserver(Protocol):
    """What the TokenizerManager tells of each request (the metrics, the dashboard's
    recorder), on the event loop's thread."""

    def observe_first_token(self, seconds: float) -> None: ...

    def observe_finished(self, req: ReqOutput, seconds: float) -> None: ...


class HandleStats(Protocol):
    """What the metrics read of the named cache handles: CacheRegistry
    (radixrt/serve/http/cache_handles.py), whose imports lead back here through the
    TokenizerManager, so it is named by its shape, not imported."""

    @property
    def num_handles(self) -> int: ...

    def token_hours(self) -> float: ...


def handle_figures(handles: HandleStats) -> dict[str, float]:
    """The handle figures /get_server_info shows next to the scheduler's."""
    return {"num_cache_handles": handles.num_handles, "cache_token_hours": handles.token_hours()}


class NoMetrics:
    """Records nothing; `render` is never called because /metrics is not served."""

    enabled = False

    def observe_first_token(self, seconds: float) -> None:
        pass

    def observe_finished(self, req: ReqOutput, seconds: float) -> None:
        pass

    def observe_prefix_break(self, cause: str) -> None:
        pass

    def render(
        self, info: InfoReplyMsg, handles: HandleStats, summary: CacheSummaryReplyMsg
    ) -> bytes:
        raise RuntimeError("metrics are disabled")


class Metrics(NoMetrics):
    """Token counters, latency histograms, and pool / queue gauges refreshed at each scrape."""

    enabled = True

    def __init__(self, model_name: str = "radixrt", spec_draft_tokens: int = 0) -> None:
        """`spec_draft_tokens`: --speculative-num-draft-tokens (0: off)."""
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            disable_created_metrics,
        )

        disable_created_metrics()  # no *_created series: they only add noise to a scrape
        self.registry = CollectorRegistry()
        r = self.registry
        self.prompt_tokens = Counter(
            "radixrt_prompt_tokens", "Prompt tokens of finished requests", registry=r
        )
        self.generation_tokens = Counter(
            "radixrt_generation_tokens", "Generated tokens of finished requests", registry=r
        )
        self.cached_tokens = Counter(
            "radixrt_cached_tokens", "Prompt tokens served from the prefix cache", registry=r
        )
        self.requests = Counter(
            "radixrt_requests", "Finished requests", ["finish_reason"], registry=r
        )
        self.ttft = Histogram(
            "radixrt_time_to_first_token_seconds",
            "Time to first token",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "radixrt_e2e_request_latency_seconds",
            "Request latency",
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.spec_requests = SpecRequestHistograms(r, spec_draft_tokens)
        self.prefix_breaks = Counter(
            "radixrt_prefix_breaks",
            "Conversation turns whose prompt did not extend the previous turn's prompt and reply",
            ["cause"],
            registry=r,
        )
        self.gauges: dict[str, Any] = {
            name: Gauge(f"radixrt_{name}", doc, registry=r)
            for name, doc in (
                ("cache_hit_rate", "Cached / prompt tokens since start (scheduler side)"),
                ("num_running_reqs", "Requests in the running batch"),
                ("num_queued_reqs", "Requests waiting to be admitted"),
                ("max_total_tokens", "KV pool capacity in tokens"),
                ("free_tokens", "KV slots on the free list"),
                ("evictable_tokens", "KV slots held by the prefix cache and evictable"),
                ("protected_tokens", "KV slots held by the prefix cache and locked"),
                ("token_usage", "Fraction of KV slots not free"),
                ("pinned_tokens", "KV slots held by pinned prefixes (never evicted until expiry)"),
                ("held_tokens", "KV slots running requests hold themselves (not yet in the tree)"),
                ("pins", "Live pins (retention, named caches, cache breakpoints)"),
                ("cache_handles", "Live named cache handles (/v1/caches and their views)"),
                ("tree_nodes", "Nodes of the radix tree (over every replica with --dp)"),
                ("largest_subtree_tokens", "Tokens under the largest child of the tree's root"),
            )
        }
        self.token_hours = _ReadCounter(
            "radixrt_cache_token_hours",
            "Tokens x hours held by named cache handles since start, live and gone",
        )
        self.misses = _ReadCounter(
            "radixrt_cache_misses",
            "Requests admitted with under half of their prompt cached (the scheduler's count)",
        )
        self.miss_causes = _ReadCounter(
            "radixrt_cache_miss_causes",
            "Misses explained at admission, by cause (within 1% of the scheduler's time)",
            "cause",
        )
        self.tiers = TierCollector()
        self.spec = SpecCollector()
        self.steps = StepTimesCollector()
        self.gateway = GatewayCollector(model_name)  # the inference gateway's names
        self.cached_by_tier = Counter(
            "radixrt_cached_tokens_by_tier",
            "Prompt tokens served from the prefix cache, by the tier they came from",
            ["tier"],
            registry=r,
        )
        for counter in (self.token_hours, self.misses, self.miss_causes, self.tiers,
                        self.spec, self.steps, self.gateway):  # fmt: skip
            r.register(counter)

    def observe_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def observe_finished(self, req: ReqOutput, seconds: float) -> None:
        self.prompt_tokens.inc(req.prompt_len)
        self.generation_tokens.inc(len(req.output_ids))
        self.cached_tokens.inc(req.cached_tokens)
        for tier, tokens in req.cached_tokens_by_tier.items():
            self.cached_by_tier.labels(tier).inc(tokens)
        kind = req.finish_reason.kind.value if req.finish_reason is not None else "abort"
        self.requests.labels(kind).inc()
        self.e2e.observe(seconds)
        self.spec_requests.observe(req)

    def observe_prefix_break(self, cause: str) -> None:
        self.prefix_breaks.labels(cause).inc()

    def render(
        self, info: InfoReplyMsg, handles: HandleStats, summary: CacheSummaryReplyMsg
    ) -> bytes:
        """The text of a scrape; `handles`: the app's cache registry."""
        from prometheus_client import generate_latest

        g = self.gauges
        for name in (
            "cache_hit_rate",
            "num_running_reqs",
            "num_queued_reqs",
            "max_total_tokens",
            "free_tokens",
            "evictable_tokens",
            "protected_tokens",
        ):
            g[name].set(getattr(info, name))
        cap = info.max_total_tokens
        g["token_usage"].set((cap - info.free_tokens) / cap if cap else 0.0)
        g["pinned_tokens"].set(info.pinned_tokens)
        in_tree = info.evictable_tokens + info.protected_tokens + info.pinned_tokens
        g["held_tokens"].set(max(0, cap - info.free_tokens - in_tree))
        g["pins"].set(info.num_pins)
        g["cache_handles"].set(handles.num_handles)
        g["tree_nodes"].set(summary.num_nodes)
        g["largest_subtree_tokens"].set(
            max((row.tokens for row in summary.subtrees if row.depth == 1), default=0)
        )
        self.token_hours.values = {"": handles.token_hours()}
        self.misses.values = {"": summary.num_misses}
        self.miss_causes.values = dict(summary.misses_by_cause)
        self.tiers.tiers = list(info.tiers)
        self.spec.info = info
        self.steps.info = info
        self.gateway.info = info
        return generate_latest(self.registry)


class _ReadCounter:
    """A counter whose totals are kept elsewhere and read at each scrape (a Counter can only be
    incremented); rendered as `<name>_total`, one series per value of `label` (none: the one
    value under the key "")."""

    def __init__(self, name: str, documentation: str, label: str | None = None) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.values: dict[str, float] = {} if label else {"": 0.0}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        if self.label is None:
            yield CounterMetricFamily(self.name, self.documentation, value=self.values[""])
            return
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, total in sorted(self.values.items()):
            family.add_metric([value], total)
        yield family
