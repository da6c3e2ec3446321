"""What a request is routed on by the standalone router and Ray Serve's router (radixrt/serve/ray/),
read from a request body they otherwise pass through:
the prompt as text (or token ids when given as ids) and a session key, both inside the
caller's namespace (its tenant or its key, and its cache_salt), so that prompts of different
namespaces never share an entry of the routing trees: one client cannot steer by, or learn
from, where another's prompts went."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from radixrt.serve.placement.policy import RouteRequest


def route_request(
    path: str, body: Any, session_header: str | None, owner: str | None = None
) -> RouteRequest:
    """The RouteRequest for a JSON `body` sent to `path`; an empty key when there is no prompt.
    A batch is routed by its first prompt; the session is the X-Session-Id header, else
    `prompt_cache_key`, else `user`. `owner` (a tenant or a key's digest; None: one shared
    namespace) and the body's cache_salt make the namespace, which leads the key and the
    session."""
    if not isinstance(body, dict):
        return RouteRequest((), session_header)
    session = session_header or _str(body.get("prompt_cache_key")) or _str(body.get("user"))
    if path == "/generate":
        key = _prompt_key(body.get("text")) or _prompt_key(body.get("input_ids"))
    elif path == "/v1/completions":
        key = _prompt_key(body.get("prompt"))
    elif path in ("/v1/chat/completions", "/v1/messages"):
        key = _chat_key(_system_first(body) if path == "/v1/messages" else body.get("messages"))
    else:
        key = ()
    salt = _str(body.get("cache_salt")) or _str(body.get("extra_key"))
    if owner is None and salt is None:
        return RouteRequest(key, session)
    namespace = f"{owner or ''}\x1f{salt or ''}"
    spaced = f"{namespace}\x1f{session}" if session is not None else None
    return RouteRequest((namespace, *key), spaced)


def _system_first(body: dict[str, Any]) -> Any:
    """An Anthropic body's system and messages as one message list (the prompt's order)."""
    messages = body.get("messages")
    system = body.get("system")
    if system is None or not isinstance(messages, list):
        return messages
    return [{"role": "system", "content": system}, *messages]


def _prompt_key(prompt: Any) -> Sequence[Hashable]:
    """str -> itself; [int, ...] -> tuple; a list of either -> its first element's key."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return tuple(prompt)
        return _prompt_key(prompt[0])
    return ()


def _chat_key(messages: Any) -> str:
    """The messages flattened to `role: content` lines, so shared history matches as a prefix."""
    if not isinstance(messages, list):
        return ""
    lines = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        lines.append(f"{m.get('role', '')}: {content if isinstance(content, str) else ''}\n")
    return "".join(lines)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
