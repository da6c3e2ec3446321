"""The scheduler's log of recent cache misses, for the dashboard: requests admitted with little
of their prompt cached, each explained (radixrt/cache/explain.py) right after its match, as the
tree stood before its own prefill went in (asked later, the tree holds the request's own tokens
and every miss reads as a hit).

Explaining costs a walk and a look through the eviction log (up to tens of ms for a long
prompt and a full log), so explaining may take at most MAX_TIME_SHARE of the scheduler's time
(a budget refilled at that rate, holding at most BURST_S); the misses past it are counted but
not explained. Owned by the Scheduler, written on its thread at admission, read there when the
loop answers a CacheSummaryReqMsg.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from radixrt.cache.explain import Explanation
from radixrt.core import Req

# Why a prompt would miss: (ids, namespace, own namespaces' prefix) -> Explanation, over the
# tree as it stands (Scheduler.explain: radixrt/cache/explain.py over the tree and its log).
Explainer = Callable[[list[int], str | None, str | None], Explanation]

LOW_SHARE = 0.5  # a request with less than this share of its prompt cached is a miss
LOG_SIZE = 16
MAX_EXPLAIN_IDS = 4096  # prompt tokens explained (the rest cannot change where it diverged)
MAX_TIME_SHARE = 0.01  # of the scheduler's time spent explaining, at most
BURST_S = 0.05  # explaining time the budget holds at most (a burst of misses after a lull)
CONTEXT_TOKENS = 32  # prompt ids kept on each side of the divergence, for the page's text


@dataclass(frozen=True, slots=True)
class Miss:
    at: float  # time.time() of the admission
    extra_key: str | None
    prompt_tokens: int
    cached_tokens: int  # what the admission matched
    why: Explanation  # of the first MAX_EXPLAIN_IDS prompt tokens
    context_start: int  # context_ids are the prompt's ids from this offset
    context_ids: list[int]  # up to CONTEXT_TOKENS each side of the divergence


class MissLog:
    """The last LOG_SIZE explained misses, and counts of all misses and of explained causes."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._entries: deque[Miss] = deque(maxlen=LOG_SIZE)
        self.num_misses = 0
        self.by_cause: dict[str, int] = {}  # explained misses only
        self._clock = clock
        self._budget = BURST_S  # seconds of explaining allowed now
        self._budget_at = clock()

    def observe(self, req: Req, explain: Explainer) -> None:
        """Log `req` if it missed: call once per request, right after its first admission."""
        if not req.prompt_len or req.cached_tokens >= LOW_SHARE * req.prompt_len:
            return
        self.num_misses += 1
        now = self._clock()
        self._budget = min(BURST_S, self._budget + (now - self._budget_at) * MAX_TIME_SHARE)
        self._budget_at = now
        if self._budget <= 0:
            return
        ids = req.input_ids[:MAX_EXPLAIN_IDS]
        # "": every namespace may be looked at; the dashboard is for admins, who see them all.
        why = explain(ids, req.extra_key, "")
        self._budget -= self._clock() - now
        self.by_cause[why.cause] = self.by_cause.get(why.cause, 0) + 1
        at = why.divergence if why.divergence is not None else why.matched_tokens
        start = max(0, at - CONTEXT_TOKENS)
        context = ids[start : at + CONTEXT_TOKENS]
        self._entries.append(
            Miss(time.time(), req.extra_key, req.prompt_len, req.cached_tokens, why, start, context)
        )

    @property
    def recent(self) -> list[Miss]:
        """Newest first."""
        return list(reversed(self._entries))
