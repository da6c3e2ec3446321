"""Named cache handles: a prompt prefix computed once, pinned in the radix tree for a TTL
(radixrt/cache/pins.py), and named by an id that later requests put in front of their own
prompt. The native /v1/caches endpoints (api/caches/) and Gemini's cachedContents (api/gemini/)
are views of these; a handle is made by a request through the serving pipeline that
computes its prefix and pins it (`HandleRender` registers it when that finished).

Ownership: the registry lives in the HTTP process and holds each handle's tokens and times; the
scheduler holds its pin (id `pin_id`). The two expire on the same wall clock. A pin dropped
early (a cache flush) is made again by the next request that uses the handle, since every such
request asks for the handle's prefix to be pinned until the handle's expiry. Handles are
scoped to a tenant (`owner`; "" without tenants): another tenant's ids are not found.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from radixrt.core import PinOutcome, PinSpec
from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.web.middleware import identity_of

MAX_TTL_S = 30 * 86400.0
MAX_HANDLES_PER_OWNER = 1024


class HandleNotFoundError(LookupError):
    """No live handle with that id for this tenant (answered with 404)."""


class HandleRefusedError(ValueError):
    """The handle's prefix could not be pinned (a bound; answered with 409 and the reason)."""


@dataclass(slots=True, eq=False)
class CacheHandle:
    id: str
    owner: str
    namespace: str | None  # the prefix-cache namespace its tokens live in
    input_ids: list[int]
    create_time: float  # wall clock, seconds
    update_time: float
    expire_time: float
    name: str | None = None
    # What a dialect needs to render requests on top of it (Gemini: contents, system, tools).
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def pin_id(self) -> str:
        return "handle-" + self.id

    @property
    def tokens(self) -> int:
        return len(self.input_ids)

    def token_hours(self, now: float | None = None) -> float:
        """Storage so far: tokens x hours held (until now or the expiry)."""
        end = min(time.time() if now is None else now, self.expire_time)
        return self.tokens * max(0.0, end - self.create_time) / 3600.0

    def pin_spec(self, now: float | None = None) -> PinSpec:
        """The pin a request using the handle asks for: its prefix, until the handle expires."""
        left = self.expire_time - (time.time() if now is None else now)
        return PinSpec(self.tokens, max(left, 0.0), self.pin_id, sliding=False, owner=self.owner)


class CacheRegistry:
    """Every live handle, by owner and id. `tm`: the TokenizerManager (or --dp dispatcher)."""

    def __init__(self, tm: Any, ttl_scale: float = 1.0) -> None:
        self.tm = tm
        self.ttl_scale = ttl_scale  # a test's factor on every TTL (ServerConfig.cache_ttl_scale)
        self._handles: dict[tuple[str, str], CacheHandle] = {}
        self._making: dict[str, int] = {}  # owner -> handles made and not yet settled
        self.expired_token_hours = 0.0  # of handles gone, for the metric

    def scaled(self, ttl_s: float) -> float:
        return ttl_s * self.ttl_scale

    def new_handle(
        self,
        owner: str,
        namespace: str | None,
        input_ids: list[int],
        expire_time: float,
        name: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> CacheHandle:
        """A handle for `input_ids`, not yet registered: the serving pipeline computes and pins
        its prefix (`HandleRender` then adds it) and `settle` ends its making, added or not.
        HandleRefusedError when `owner` holds too many, those being made counted."""
        self._expire()
        held = sum(1 for o, _ in self._handles if o == owner) + self._making.get(owner, 0)
        if held >= MAX_HANDLES_PER_OWNER:
            raise HandleRefusedError(
                f"this tenant holds {MAX_HANDLES_PER_OWNER} caches; delete some first"
            )
        self._making[owner] = self._making.get(owner, 0) + 1
        now = time.time()
        return CacheHandle(uuid.uuid4().hex[:24], owner, namespace, list(input_ids), now, now,
                           expire_time, name, dict(meta or {}))  # fmt: skip

    def add(self, handle: CacheHandle, outcomes: list[PinOutcome]) -> CacheHandle:
        """Register `handle` once its prefill request finished with `outcomes` (its pins' own);
        HandleRefusedError, with the scheduler's reason, when its prefix was not pinned."""
        outcome = outcomes[0] if outcomes else None
        if outcome is None or not outcome.pinned:
            reason = outcome.reason if outcome is not None else "the request did not finish"
            raise HandleRefusedError(f"the cache could not be pinned: {reason}")
        self._handles[(handle.owner, handle.id)] = handle
        return handle

    def settle(self, handle: CacheHandle) -> None:
        """`handle`'s making is over (added, refused or abandoned)."""
        left = self._making.get(handle.owner, 0) - 1
        if left > 0:
            self._making[handle.owner] = left
        else:
            self._making.pop(handle.owner, None)

    def get(self, owner: str, handle_id: str) -> CacheHandle:
        self._expire()
        handle = self._handles.get((owner, handle_id))
        if handle is None:
            raise HandleNotFoundError(f"no cache {handle_id!r} (it expired, or never existed)")
        return handle

    def list(self, owner: str) -> list[CacheHandle]:
        """The owner's live handles, oldest first."""
        self._expire()
        mine = [h for (o, _), h in self._handles.items() if o == owner]
        return sorted(mine, key=lambda h: (h.create_time, h.id))

    async def update(self, owner: str, handle_id: str, expire_time: float) -> CacheHandle:
        handle = self.get(owner, handle_id)
        handle.expire_time, handle.update_time = expire_time, time.time()
        await self.tm.update_pin(handle.pin_id, expire_time)  # absent after a flush: re-made
        return handle

    async def delete(self, owner: str, handle_id: str) -> None:
        handle = self.get(owner, handle_id)
        del self._handles[(owner, handle_id)]
        self.expired_token_hours += handle.token_hours()
        await self.tm.update_pin(handle.pin_id, None)

    @property
    def num_handles(self) -> int:
        """Live handles of every owner."""
        self._expire()
        return len(self._handles)

    def token_hours(self) -> float:
        """Storage of every handle so far, live and gone."""
        now = time.time()
        return self.expired_token_hours + sum(h.token_hours(now) for h in self._handles.values())

    def _expire(self) -> None:
        """Forget handles past their expiry (the scheduler drops their pins on its own)."""
        now = time.time()
        for key in [k for k, h in self._handles.items() if h.expire_time <= now]:
            self.expired_token_hours += self._handles.pop(key).token_hours(now)


def expire_time_for(ttl_s: float, registry: CacheRegistry, what: str = "ttl") -> float:
    """now + the scaled TTL; ValueError naming `what` when it is not in (0, MAX_TTL_S]."""
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"{what} must be in (0, {MAX_TTL_S:.0f}] seconds, got {ttl_s}")
    return time.time() + registry.scaled(ttl_s)


def owner_of(request: Request) -> str:
    """Whose handles a request sees: its tenant's ("" without tenants)."""
    return identity_of(request).tenant or ""


class HandleRender(BaseRender):
    """The answer to a handle's prefill request: the handle, registered, as `show` renders it."""

    def __init__(
        self,
        registry: CacheRegistry,
        handle: CacheHandle,
        show: Callable[[CacheHandle], dict[str, Any]],
    ) -> None:
        self.registry = registry
        self.handle = handle
        self.show = show

    def response(self, done: Finished) -> dict[str, Any]:
        return self.show(self.registry.add(self.handle, done.states[0].out.pins))
