"""`GET /v1/responses/{id}/input_items`: a stored response's input as Responses items (the
conversation it was given: earlier turns' input and output through previous_response_id,
then its own input; instructions are not items), in OpenAI's list shape with `order`,
`limit` and an `after` cursor. Item ids are derived from the response id and the item's
place, so a cursor names the same item on every call."""

from __future__ import annotations

from typing import Any

from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import ToolCall

MAX_LIMIT, DEFAULT_LIMIT = 100, 20


def input_items(response_id: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of `messages` (turns as the tool layer takes them), oldest first."""
    items: list[dict[str, Any]] = []
    tag = response_id.removeprefix("resp_")

    def add(prefix: str, item: dict[str, Any]) -> None:
        items.append({"id": f"{prefix}_{tag}{len(items):04d}", **item, "status": "completed"})

    for m in messages:
        role, text = m["role"], m.get("content") or ""
        if role == "tool":
            add("fco", {"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                        "output": text})  # fmt: skip
            continue
        calls: list[ToolCall] = m.get("tool_calls") or []
        if text or not calls:
            part = ({"type": "output_text", "text": text, "annotations": []} if role == "assistant"
                    else {"type": "input_text", "text": text})  # fmt: skip
            add("msg", {"type": "message", "role": role, "content": [part]})
        for c in calls:  # (arguments: the JSON text as written)
            add("fc", {"type": "function_call", "call_id": c.id, "name": c.name,
                       "arguments": c.arguments})  # fmt: skip
    return items


def page(
    items: list[dict[str, Any]],
    query: dict[str, str],
    what: str = "input item of this response",
    max_limit: int = MAX_LIMIT,
) -> dict[str, Any]:
    """One page of `items` (oldest first) as OpenAI lists them: `order` desc (the default) or
    asc, at most `limit` (1-max_limit, default 20), after the item `after` names (a `what`)."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadRequestError(f"order: must be 'asc' or 'desc', got {order!r}")
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise BadRequestError("limit: must be an integer") from None
    if not 1 <= limit <= max_limit:
        raise BadRequestError(f"limit: must be in [1, {max_limit}], got {limit}")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise BadRequestError(f"after: no {what} with id {after!r}")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"object": "list", "data": data, "first_id": first, "last_id": last,
            "has_more": len(ordered) > limit}  # fmt: skip
