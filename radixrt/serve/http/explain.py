"""Why a prompt would miss the prefix cache, in the caller's own namespace
(radixrt/cache/explain.py), rendered with the text on both sides of where it leaves the
nearest cached prefix. Asked for by `POST /v1/cache/explain` (api/caches/) and per request
with `"explain_cache": true`, both through the serving pipeline (admitted and counted like a
request; not when streaming).

What a caller may see: its request's namespace, and its tenant's other namespaces (other
salts) only when it has a tenant; without tenants a salt is anyone's who knows it, so no
other salt is looked at. Cached text (`cached_side`) only from a namespace that is someone's
(a tenant's, or a salt's): the unsalted namespace of a server without tenants is everyone's,
and its cached text would be other clients' prompts."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.web.middleware import identity_of

CONTEXT_CHARS = 40  # decoded characters shown on each side of the divergence
CONTEXT_TOKENS = 32  # tokens decoded for them (more than 40 characters' worth)


async def explain_prompts(
    tm: Any, tenancy: Tenancy, request: Request, prompts: list[list[int]], namespace: Any
) -> dict[tuple[int, ...], dict[str, Any]]:
    """The explanation of each distinct prompt, as the cache stands before they run (the
    per-request opt-in `explain_cache`), keyed by its token ids."""
    own = identity_of(request).own_prefix(tenancy.shared_prefix_cache)
    show_cached = namespace is not None
    out: dict[tuple[int, ...], dict[str, Any]] = {}
    for ids in prompts:
        key = tuple(ids)
        if key not in out:
            reply = await tm.explain_cache(ids, namespace, own)
            out[key] = render_explanation(reply, ids, tm.tokenizer, show_cached=show_cached)
    return out


def render_explanation(
    reply: Any, ids: list[int], tokenizer: Any, ids_start: int = 0, show_cached: bool = True
) -> dict[str, Any]:
    """The reply (ExplainReplyMsg or MissMsg) with its sides decoded (windows of CONTEXT_TOKENS
    tokens, so a long prompt costs no more than a short one); `ids` are the prompt's from
    offset `ids_start` on, and hold at least the window around the divergence. The cache's
    side only with `show_cached`."""
    out: dict[str, Any] = {
        "cause": reply.cause,
        "prompt_tokens": reply.prompt_tokens,
        "cached_tokens": reply.matched_tokens,
        "divergence": reply.divergence,
    }
    if reply.divergence is not None:
        at = reply.divergence
        i = at - ids_start
        before = tokenizer.decode(ids[max(0, i - CONTEXT_TOKENS) : i])[-CONTEXT_CHARS:]
        after = tokenizer.decode(ids[i : i + CONTEXT_TOKENS])[:CONTEXT_CHARS]
        out["prompt_side"] = {"before": before, "after": after}
        if reply.cached_next and show_cached:
            # cached_next starts where the match ends; the divergence may be a few tokens on.
            cached_after = list(reply.cached_next)[at - reply.matched_tokens :]
            out["cached_side"] = {
                "before": before,
                "after": tokenizer.decode(cached_after)[:CONTEXT_CHARS],
            }
    if reply.evicted_at is not None:
        out["evicted_at"] = reply.evicted_at
    if reply.other_namespace_tokens:
        out["other_namespace_tokens"] = reply.other_namespace_tokens
    return out
