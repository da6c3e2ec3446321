"""Each caller's own figures, for `GET /v1/usage`: what it has in flight against its limits,
and its requests and tokens since the server started (a tenant's, with tenants; a key's or
an address's otherwise). A RequestObserver of every TokenizerManager, on the event loop's
thread. Nothing here is about another caller: the server-wide figures stay admin-only."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from radixrt.serve.results.state import ReqOutput

MAX_CALLERS = 10_000  # least recently finished ones are forgotten past this


@dataclass(slots=True)
class CallerTotals:
    requests: int = 0
    errors: int = 0  # finished with an error of their own (4xx/5xx)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    explains: int = 0  # POST /v1/cache/explain calls
    explained_tokens: int = 0  # their prompts' tokens

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        prompt = self.prompt_tokens
        out["cache_hit_rate"] = self.cached_tokens / prompt if prompt else 0.0
        return out


class TenantUsage:
    def __init__(self, max_callers: int = MAX_CALLERS) -> None:
        self.max_callers = max_callers
        self._totals: OrderedDict[str, CallerTotals] = OrderedDict()

    def observe_first_token(self, seconds: float) -> None:
        pass

    def observe_finished(self, req: ReqOutput, seconds: float) -> None:
        totals = self._touch(req.caller)
        totals.requests += 1
        totals.errors += int(req.finish_reason is not None and req.finish_reason.is_error)
        totals.prompt_tokens += req.prompt_len
        totals.cached_tokens += req.cached_tokens
        totals.completion_tokens += len(req.output_ids)

    def observe_explain(self, caller: str, tokens: int) -> None:
        """A cache explanation of a `tokens` prompt, asked for by `caller`."""
        totals = self._touch(caller)
        totals.explains += 1
        totals.explained_tokens += tokens

    def of(self, caller: str) -> CallerTotals:
        return self._totals.get(caller) or CallerTotals()

    def _touch(self, caller: str) -> CallerTotals:
        """`caller`'s totals, made the most recent (the least recent forgotten past the cap)."""
        totals = self._totals.pop(caller, None) or CallerTotals()
        self._totals[caller] = totals
        if len(self._totals) > self.max_callers:
            self._totals.popitem(last=False)
        return totals
