"""Anthropic's Message Batches in radixrt's terms: the create body as lines for /v1/messages
(checked once, here), the MessageBatch object, and the results file.

Results line: {"custom_id", "result": {"type": "succeeded", "message": {...}} | {"type":
"errored", "error": <the route's error body>} | {"type": "canceled"} | {"type": "expired"}},
in request order. `results_url` is a path on this server (the SDK resolves it against its
base URL, so it works behind a proxy that adds a prefix)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from radixrt.serve.http.api.batches.jobs import (
    CANCELED,
    CANCELING,
    ENDED,
    ERRORED,
    EXPIRED,
    SUCCEEDED,
    BatchJob,
    BatchLine,
    rfc3339,
)
from radixrt.serve.http.api.batches.openai_format import json_or_message
from radixrt.serve.http.protocol import BadRequestError, decode_body

PATH = "/v1/messages/batches"
KIND = "msgbatch_"  # ids of Anthropic batches
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_encode = msgspec.json.Encoder()


class BatchRequest(msgspec.Struct, forbid_unknown_fields=True):
    custom_id: str
    params: dict[str, Any]


class BatchCreate(msgspec.Struct, forbid_unknown_fields=True):
    requests: list[BatchRequest]


def parse_batch(raw: bytes, max_lines: int) -> list[BatchLine]:
    """A create body's requests as /v1/messages calls; a 400 for what fails the whole batch
    (no requests, too many, a custom_id that is malformed or used twice, a streamed one)."""
    body = decode_body(raw, BatchCreate)
    if not body.requests:
        raise BadRequestError("requests: at least one request is needed")
    if len(body.requests) > max_lines:
        raise BadRequestError(
            f"requests: {len(body.requests)}, over {max_lines} (--max-batch-requests)"
        )
    seen: set[str] = set()
    lines = []
    for i, request in enumerate(body.requests):
        where = f"requests[{i}]"
        if not _CUSTOM_ID.fullmatch(request.custom_id):
            raise BadRequestError(
                f"{where}.custom_id: 1 to 64 letters, digits, '_' or '-', got "
                f"{request.custom_id[:80]!r}"
            )
        if request.custom_id in seen:
            raise BadRequestError(f"{where}.custom_id: {request.custom_id!r} is used twice")
        if request.params.get("stream"):
            raise BadRequestError(f"{where}.params.stream: not supported in a batch")
        seen.add(request.custom_id)
        lines.append(BatchLine(request.custom_id, "/v1/messages", _encode.encode(request.params)))
    return lines


def batch_card(job: BatchJob) -> dict[str, Any]:
    """The MessageBatch object Anthropic's client parses."""
    counts = job.counts()
    status = {CANCELING: "canceling", ENDED: "ended"}.get(job.status, "in_progress")
    return {
        "id": job.id, "type": "message_batch", "processing_status": status,
        "request_counts": {"processing": counts["processing"], "succeeded": counts[SUCCEEDED],
                           "errored": counts[ERRORED], "canceled": counts[CANCELED],
                           "expired": counts[EXPIRED]},
        "created_at": rfc3339(job.created_at), "expires_at": rfc3339(job.expires_at),
        "ended_at": rfc3339(job.ended_at), "cancel_initiated_at": rfc3339(job.cancel_at),
        "archived_at": None,
        "results_url": f"{PATH}/{job.id}/results" if job.status == ENDED else None,
    }  # fmt: skip


def batch_page(jobs: list[BatchJob], query: dict[str, str]) -> dict[str, Any]:
    """One page of `jobs` (newest first) as Anthropic lists them: at most `limit` (1-1000,
    default 20), after the batch `after_id` names or before the one `before_id` names."""
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise BadRequestError("limit: must be an integer") from None
    if not 1 <= limit <= 1000:
        raise BadRequestError(f"limit: must be in [1, 1000], got {limit}")
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise BadRequestError("give after_id or before_id, not both")
    ids = [job.id for job in jobs]
    for name, cursor in (("after_id", after), ("before_id", before)):
        if cursor is not None and cursor not in ids:
            raise BadRequestError(f"{name}: no message batch with id {cursor!r}")
    if after is not None:
        chosen = jobs[ids.index(after) + 1 :]
        data, more = chosen[:limit], len(chosen) > limit
    elif before is not None:
        chosen = jobs[: ids.index(before)]
        data, more = chosen[-limit:], len(chosen) > limit
    else:
        data, more = jobs[:limit], len(jobs) > limit
    first, last = (data[0].id, data[-1].id) if data else (None, None)
    return {"data": [batch_card(job) for job in data], "has_more": more, "first_id": first,
            "last_id": last}  # fmt: skip


def results_file(job: BatchJob) -> bytes:
    """The ended job's results, JSONL in request order."""
    out = []
    for line, result in zip(job.lines, job.results, strict=True):
        assert result is not None, "an ended job has every line's result"
        if result.outcome == SUCCEEDED:
            outcome: dict[str, Any] = {"type": SUCCEEDED, "message": msgspec.Raw(result.body)}
        elif result.outcome == ERRORED:
            outcome = {"type": ERRORED, "error": json_or_message(result.body)}
        else:
            outcome = {"type": result.outcome}
        out.append(_encode.encode({"custom_id": line.custom_id, "result": outcome}) + b"\n")
    return b"".join(out)
