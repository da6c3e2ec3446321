"""The native cache handle as JSON (`/v1/caches`): its id, name, size, times and storage."""

from __future__ import annotations

from typing import Any

from radixrt.serve.http.cache_handles import CacheHandle


def render_handle(handle: CacheHandle) -> dict[str, Any]:
    return {
        "id": handle.id,
        "object": "cache",
        "name": handle.name,
        "tokens": handle.tokens,
        "create_time": handle.create_time,
        "update_time": handle.update_time,
        "expire_time": handle.expire_time,
        "token_hours": round(handle.token_hours(), 6),
    }
