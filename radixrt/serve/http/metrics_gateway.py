"""The model-server protocol's gauges, under the names Kubernetes' inference gateway (the
Gateway API inference extension's endpoint picker, llm-d) reads by default: vLLM's.

| protocol metric      | series                                                   |
|----------------------|----------------------------------------------------------|
| TotalQueuedRequests  | `vllm:num_requests_waiting`                              |
| TotalRunningRequests | `vllm:num_requests_running`                              |
| KVCacheUtilization   | `vllm:kv_cache_usage_perc` (and the older `vllm:gpu_cache_usage_perc`) |

KV-cache utilisation is the share of the pool that cannot be had back now: slots running
requests hold, locked prefixes and pinned prefixes, over capacity (cached prefixes that could
be evicted count as free, as vLLM counts its cached free blocks). Read from the scheduler's
InfoReplyMsg at each scrape, with a `model_name` label (the served model's name).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt.core.messages import InfoReplyMsg

_DOC = {
    "vllm:num_requests_waiting": "Requests waiting to be admitted (model-server protocol)",
    "vllm:num_requests_running": "Requests in the running batch (model-server protocol)",
    "vllm:kv_cache_usage_perc": "Share of the KV pool not free nor evictable, 0-1",
    "vllm:gpu_cache_usage_perc": "The same as vllm:kv_cache_usage_perc (older name)",
}


def kv_cache_usage(info: InfoReplyMsg) -> float:
    """(capacity - free - evictable) / capacity: what requests and pins hold."""
    cap = info.max_total_tokens
    return max(0, cap - info.free_tokens - info.evictable_tokens) / cap if cap else 0.0


class GatewayCollector:
    """Set `info` before each scrape."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.info: InfoReplyMsg | None = None

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        info = self.info
        if info is None:
            return
        usage = kv_cache_usage(info)
        values = {
            "vllm:num_requests_waiting": info.num_queued_reqs,
            "vllm:num_requests_running": info.num_running_reqs,
            "vllm:kv_cache_usage_perc": usage,
            "vllm:gpu_cache_usage_perc": usage,
        }
        for name, value in values.items():
            family = GaugeMetricFamily(name, _DOC[name], labels=["model_name"])
            family.add_metric([self.model_name], float(value))
            yield family
