"""Gemini's batch mode in radixrt's terms: `models/{model}:batchGenerateContent` with inline
requests as lines for that model's generateContent (checked once, here), and the batch as the
long-running operation google-genai's `client.batches` reads: `name` ("batches/<id>"),
`metadata.state` (BATCH_STATE_RUNNING, then SUCCEEDED, CANCELLED or EXPIRED), times, counts,
and once ended `metadata.output.inlinedResponses.inlinedResponses` in request order (each a
`response`, or an `error` {code, message, status}, with the request's `metadata`). Requests
from an uploaded file (`fileName`) are not served: a 400."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.api.batches.jobs import (
    CANCELED,
    ENDED,
    ERRORED,
    EXPIRED,
    LINE_OVERHEAD,
    SUCCEEDED,
    BatchJob,
    BatchLine,
    rfc3339,
)
from radixrt.serve.http.protocol import BadRequestError, decode_body

KIND = "gembatch_"  # ids of Gemini batches: their name is "batches/<id>"
_encode = msgspec.json.Encoder()


class InlinedRequest(msgspec.Struct, forbid_unknown_fields=True):
    request: dict[str, Any]
    metadata: dict[str, str] | None = None  # (google-genai reads it back as str -> str)


class InlinedRequests(msgspec.Struct, forbid_unknown_fields=True):
    requests: list[InlinedRequest]


class InputConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    requests: InlinedRequests | None = None
    file_name: str | None = None


class Batch(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    input_config: InputConfig
    display_name: str | None = None
    priority: int | str | None = None  # (taken; batches run in the order made)


class BatchCreate(msgspec.Struct, forbid_unknown_fields=True):
    batch: Batch


def parse_batch(
    raw: bytes, path: str, max_lines: int
) -> tuple[list[BatchLine], dict[str, Any], int]:
    """A create body's requests as calls of `path` (the model's :generateContent), the job's
    info (display name, each request's metadata) and what that info holds in bytes; a 400
    for what fails the whole batch (no requests, too many, an uploaded file as the source)."""
    body = decode_body(raw, BatchCreate)
    source = body.batch.input_config
    if source.file_name is not None:
        raise BadRequestError("batch.inputConfig.fileName: uploaded files are not served; "
                              "give the requests inline")  # fmt: skip
    if source.requests is None or not source.requests.requests:
        raise BadRequestError("batch.inputConfig.requests.requests: at least one is needed")
    requests = source.requests.requests
    if len(requests) > max_lines:
        raise BadRequestError(f"{len(requests)} requests, over {max_lines} (--max-batch-requests)")
    lines = [BatchLine(str(i), path, _encode.encode(r.request)) for i, r in enumerate(requests)]
    metadata = [r.metadata for r in requests]
    size = len(_encode.encode(metadata)) + LINE_OVERHEAD * len(metadata)
    return lines, {"display_name": body.batch.display_name, "metadata": metadata}, size


def batch_operation(job: BatchJob, output: bool = True) -> dict[str, Any]:
    """The batch as the operation the Gemini API answers with (an ended one with its inline
    responses unless not `output`: a listing leaves them to `batches.get`)."""
    counts, info = job.counts(), job.info
    if job.status != ENDED:
        state = "BATCH_STATE_RUNNING"
    elif job.cancel_at is not None:
        state = "BATCH_STATE_CANCELLED"
    elif counts[EXPIRED]:
        state = "BATCH_STATE_EXPIRED"
    else:
        state = "BATCH_STATE_SUCCEEDED"
    failed = counts[ERRORED] + counts[CANCELED] + counts[EXPIRED]
    metadata: dict[str, Any] = {
        "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
        "name": "batches/" + job.id, "model": info["model"],
        "displayName": info.get("display_name") or job.id,
        "createTime": rfc3339(job.created_at), "endTime": rfc3339(job.ended_at),
        "updateTime": rfc3339(job.ended_at or job.created_at), "state": state,
        "batchStats": {"requestCount": str(len(job.lines)),
                       "successfulRequestCount": str(counts[SUCCEEDED]),
                       "failedRequestCount": str(failed),
                       "pendingRequestCount": str(counts["processing"])},
    }  # fmt: skip
    operation: dict[str, Any] = {"name": "batches/" + job.id, "metadata": metadata}
    if job.status == ENDED and output:
        metadata["output"] = {"inlinedResponses": {"inlinedResponses": _responses(job)}}
    if job.status == ENDED:
        operation["done"] = True
    if "output" in metadata:
        operation["response"] = {"@type": metadata["@type"].replace("Batch", "BatchOutput"),
                                 **metadata["output"]}  # fmt: skip
    return operation


def _responses(job: BatchJob) -> list[dict[str, Any]]:
    out = []
    for result, metadata in zip(job.results, job.info["metadata"], strict=True):
        assert result is not None, "an ended job has every line's result"
        entry: dict[str, Any] = {}
        if result.outcome == SUCCEEDED:
            entry["response"] = msgspec.Raw(result.body)
        elif result.outcome == ERRORED:  # the route's {"error": {code, message, status}}
            try:
                answer = msgspec.json.decode(result.body)
            except msgspec.DecodeError:
                answer = None
            error = answer.get("error") if isinstance(answer, dict) else None
            entry["error"] = (
                error
                if isinstance(error, dict)
                else {"code": result.status, "message": result.body.decode("utf-8", "replace")}
            )
        else:
            code = {CANCELED: "CANCELLED", EXPIRED: "DEADLINE_EXCEEDED"}[result.outcome]
            entry["error"] = {"code": 499 if result.outcome == CANCELED else 504,
                              "message": f"the request did not run: {result.outcome}",
                              "status": code}  # fmt: skip
        if metadata is not None:
            entry["metadata"] = metadata
        out.append(entry)
    return out


def operations_page(jobs: list[BatchJob], query: dict[str, str]) -> dict[str, Any]:
    """One page of `jobs` (newest first): `pageSize` (1-1000, default 50) and the
    `pageToken` a page before gave (`nextPageToken`)."""
    try:
        size = int(query.get("pageSize", "50"))
        start = int(query.get("pageToken") or "0")
    except ValueError:
        raise BadRequestError("pageSize and pageToken: integers") from None
    if not 1 <= size <= 1000 or start < 0:
        raise BadRequestError("pageSize: 1 to 1000; pageToken: from an earlier page")
    page = jobs[start : start + size]
    out: dict[str, Any] = {"operations": [batch_operation(job, False) for job in page]}
    if start + size < len(jobs):
        out["nextPageToken"] = str(start + size)
    return out
