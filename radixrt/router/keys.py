"""What the standalone router routes on, read from a request body it otherwise passes through:
the prompt as text (or token ids when given as ids) and a session key."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from radixrt.routing.policy import RouteRequest


def route_request(path: str, body: Any, session_header: str | None) -> RouteRequest:
    """The RouteRequest for a JSON `body` sent to `path`; an empty key when there is no prompt.
    A batch is routed by its first prompt; the session is the X-Session-Id header, else
    `prompt_cache_key`, else `user`."""
    if not isinstance(body, dict):
        return RouteRequest((), session_header)
    session = session_header or _str(body.get("prompt_cache_key")) or _str(body.get("user"))
    if path == "/generate":
        key = _prompt_key(body.get("text")) or _prompt_key(body.get("input_ids"))
    elif path == "/v1/completions":
        key = _prompt_key(body.get("prompt"))
    elif path == "/v1/chat/completions":
        key = _chat_key(body.get("messages"))
    else:
        key = ()
    return RouteRequest(key, session)


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
