"""The bodies of the control endpoints: a request to abort, a cache flush."""

from __future__ import annotations

import msgspec
from starlette.requests import Request

from radixrt.server.protocol import BadRequestError, decode_body


class AbortRequest(msgspec.Struct, forbid_unknown_fields=True):
    rid: str


class FlushCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    disk: bool = False  # also delete this model's block files in the disk tier (--cache-dir)


def flush_request(request: Request, body: bytes) -> FlushCacheRequest:
    """`{"disk": true}` as a JSON body or `?disk=true` (an empty body is no flag)."""
    req = decode_body(body, FlushCacheRequest) if body.strip() else FlushCacheRequest()
    flag = request.query_params.get("disk")
    if flag is not None:
        if flag.lower() not in ("true", "1", "false", "0"):
            raise BadRequestError(f"disk takes true or false, got {flag[:20]!r}")
        req = FlushCacheRequest(req.disk or flag.lower() in ("true", "1"))
    return req
