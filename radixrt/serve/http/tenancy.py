"""Tenants at the HTTP front: the keys the server accepts, each request's prefix-cache
namespace and its tenant's share of the server.

The namespace is where a request may match and insert in the radix tree (`Req.extra_key`):
its tenant's own, plus the client's optional `cache_salt` (or the older `extra_key` field),
unless `--shared-prefix-cache`. Matching, `cached_tokens`, the scheduler's wait for another
request's prefill and the radix tree's integrity all work per namespace, so one tenant can
neither read how much of a guessed prompt another has cached nor time it. Without keys, or
with a single `--api-key`, there is one namespace per salt, as before tenants existed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from radixrt.core.config import ServerConfig
from radixrt.serve.http.protocol import BadRequestError, check_id
from radixrt.serve.http.tenant_usage import TenantUsage
from radixrt.serve.web.keys import KeyRing, KeyStore, read_service_key
from radixrt.serve.web.middleware import AuthMiddleware, caller_of, identity_of

logger = logging.getLogger("radixrt")


class TooManyRequestsError(Exception):
    """A tenant over its share (`--max-requests-per-tenant`, `--max-tokens-per-tenant`);
    answered with 429."""


def work_of(prompts: list[list[int]], params: list[Any]) -> tuple[int, int]:
    """(requests, tokens) a call asks for: n samples per prompt, each its prompt plus
    max_new_tokens (what it may hold in the KV pool)."""
    num = sum(sp.n for sp in params)
    tokens = sum((len(p) + sp.max_new_tokens) * sp.n for p, sp in zip(prompts, params))
    return num, tokens


@dataclass
class Tenancy:
    keys: KeyStore | None  # None: no key needed
    shared_prefix_cache: bool = False
    max_requests_per_tenant: int | None = None
    max_tokens_per_tenant: int | None = None
    # Each caller's own figures (GET /v1/usage), fed by the TokenizerManagers as an observer.
    usage: TenantUsage = field(default_factory=TenantUsage)
    # caller -> [requests, tokens] admitted and not yet submitted (admit's blocks in progress)
    _held: dict[str, list[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, server: ServerConfig) -> Tenancy:
        """The key file is read here: KeyFileError (a ValueError naming the problem) if it
        cannot be used."""
        keys = None
        service = None
        if server.service_key_file is not None:
            service = read_service_key(server.service_key_file)
        if server.api_key_file is not None:
            keys = KeyStore(KeyRing.from_file(server.api_key_file), server.api_key_file, service)
        elif server.api_key is not None:
            keys = KeyStore(KeyRing.single(server.api_key), None, service)
        elif service is not None:  # only the router may call
            keys = KeyStore(KeyRing([]), None, service)
        return cls(
            keys,
            server.shared_prefix_cache,
            server.max_requests_per_tenant,
            server.max_tokens_per_tenant,
        )

    def install(self, app: Any) -> None:
        """Add the key check, outermost: no body is read before it."""
        if self.keys is not None:
            app.add_middleware(AuthMiddleware, keys=self.keys)

    def watch_sighup(self) -> None:
        """Re-read the key file on SIGHUP (from the running event loop)."""
        if self.keys is None or self.keys.path is None:
            return
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.keys.reload)

    def namespace(self, request: Request, cache_salt: str | None, extra_key: str | None) -> Any:
        """The prefix-cache namespace (str or None) of a request with these fields."""
        if cache_salt is not None and extra_key is not None and cache_salt != extra_key:
            raise BadRequestError("give cache_salt or extra_key, not both")
        salt = cache_salt if cache_salt is not None else extra_key
        check_id(salt, "cache_salt")
        return identity_of(request).namespace(salt, self.shared_prefix_cache)

    @contextlib.contextmanager
    def admit(self, tm: Any, request: Request, num: int, tokens: int = 0) -> Iterator[None]:
        """Refuse `num` more requests holding up to `tokens` (work_of) of this tenant when
        they would pass its share (`tm`: the TokenizerManager or the --dp dispatcher); else
        hold them against the share until the block ends, by which time they are submitted
        (and counted by `tm`) or refused, so calls waiting in between cannot pass it too."""
        if identity_of(request).tenant is None:
            yield
            return
        caller = caller_of(request)
        held = self._held.setdefault(caller, [0, 0])
        most = self.max_tokens_per_tenant
        if most is not None:
            in_flight = tm.tokens_in_flight(caller) + held[1]
            if in_flight + tokens > most:
                raise TooManyRequestsError(
                    f"this tenant's requests in flight hold up to {in_flight} tokens (prompt "
                    f"plus max_tokens) and this one asks for {tokens}; the limit is {most} "
                    "(--max-tokens-per-tenant)"
                )
        limit = self.max_requests_per_tenant
        if limit is not None:
            in_flight = tm.num_in_flight(caller) + held[0]
            if in_flight + num > limit:
                raise TooManyRequestsError(
                    f"this tenant has {in_flight} requests in flight; the limit is {limit} "
                    "(--max-requests-per-tenant)"
                )
        held[0] += num
        held[1] += tokens
        try:
            yield
        finally:
            held[0] -= num
            held[1] -= tokens
            if held == [0, 0]:
                del self._held[caller]

    def usage_of(self, tm: Any, request: Request) -> dict[str, Any]:
        """The caller's own figures: in flight against its limits, and since start."""
        caller = caller_of(request)
        return {
            "tenant": identity_of(request).tenant,
            "in_flight": {
                "requests": tm.num_in_flight(caller),
                "tokens": tm.tokens_in_flight(caller),
            },
            "limits": {
                "max_requests_per_tenant": self.max_requests_per_tenant,
                "max_tokens_per_tenant": self.max_tokens_per_tenant,
            },
            "since_start": self.usage.of(caller).as_dict(),
        }
