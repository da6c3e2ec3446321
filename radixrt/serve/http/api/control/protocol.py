"""The bodies of the control endpoints: a request to abort, a cache flush."""

from __future__ import annotations

import msgspec
from starlette.requests import Request

from radixrt.serve.http.protocol import BadRequestError, decode_body


class AbortRequest(msgspec.Struct, forbid_unknown_fields=True):
    rid: str


MAX_FLUSH_WAIT_S = 600.0


class FlushCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    disk: bool = False  # also delete this model's block files in the disk tier (--cache-dir)
    # SGLang's flag to also hand the device allocator's cached memory back: radixrt's pools
    # are allocated once and kept, so a flush has nothing more to release either way.
    empty_cache: bool = True


def flush_wait_s(request: Request) -> float:
    """`?timeout=S` (SGLang's bench_serving sends it): wait up to S seconds for running
    requests to finish before flushing; 0 (none given): refuse at once while any run."""
    raw = request.query_params.get("timeout")
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_FLUSH_WAIT_S:
        raise BadRequestError(
            f"timeout takes seconds in [0, {MAX_FLUSH_WAIT_S:g}], got {raw[:20]!r}"
        )
    return wait


def flush_request(request: Request, body: bytes) -> FlushCacheRequest:
    """`{"disk": true}` as a JSON body or `?disk=true` (an empty body is no flag)."""
    req = decode_body(body, FlushCacheRequest) if body.strip() else FlushCacheRequest()
    flag = request.query_params.get("disk")
    if flag is not None:
        if flag.lower() not in ("true", "1", "false", "0"):
            raise BadRequestError(f"disk takes true or false, got {flag[:20]!r}")
        req = FlushCacheRequest(req.disk or flag.lower() in ("true", "1"), req.empty_cache)
    return req
