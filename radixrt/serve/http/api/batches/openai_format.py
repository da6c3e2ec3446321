"""OpenAI's Batch API in radixrt's terms: the create body, the JSONL input file as lines (each
checked once, here), the Batch object, and the output and error files a batch writes.

Input line: {"custom_id", "method": "POST", "url": <the batch's endpoint>, "body": {...}}.
Output file line (answered 200): {"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error": null}; error file line: the same with the route's error
answer, or "response": null and "error": {"code": "batch_cancelled" | "batch_expired"} for a
line that never ran. Lines are written in input order."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from radixrt.serve.http.api.batches.jobs import (
    CANCELED,
    CANCELING,
    ENDED,
    EXPIRED,
    SUCCEEDED,
    BatchJob,
    BatchLine,
)
from radixrt.serve.http.protocol import BadRequestError

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
KIND = "batch_"  # ids of OpenAI batches
MAX_CUSTOM_ID = 512
MAX_ERRORS = 100  # validation errors reported (the first)
_decode_line = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


class ExpiresAfter(msgspec.Struct, forbid_unknown_fields=True):
    anchor: str
    seconds: int

    def check(self, where: str) -> int:
        if self.anchor != "created_at":
            raise BadRequestError(f"{where}.anchor: only 'created_at' is supported")
        if not 3600 <= self.seconds <= 2592000:
            raise BadRequestError(f"{where}.seconds must be in [3600, 2592000]")
        return self.seconds


class BatchCreate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: ExpiresAfter | None = None

    def check(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise BadRequestError(
                f"endpoint: {self.endpoint!r} is not served in batches; one of "
                + ", ".join(ENDPOINTS)
            )
        if self.completion_window != "24h":
            raise BadRequestError("completion_window: only '24h' is supported")
        if self.output_expires_after is not None:
            self.output_expires_after.check("output_expires_after")


def input_lines(data: bytes, endpoint: str, max_lines: int) -> tuple[list[BatchLine], list[Any]]:
    """The file's requests, and the errors that fail the batch (OpenAI's BatchError objects:
    code, line, message, param); an empty file, a line that is not such a request, a
    custom_id seen before or a streamed body is an error."""
    lines: list[BatchLine] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()

    def error(code: str, number: int | None, message: str, param: str | None = None) -> None:
        if len(errors) < MAX_ERRORS:
            errors.append({"code": code, "line": number, "message": message, "param": param})

    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = _decode_line.decode(raw)
        except msgspec.DecodeError as e:
            error("invalid_json_line", number, f"this line is not JSON: {e}")
            continue
        if not isinstance(obj, dict):
            error("invalid_request", number, "each line must be a JSON object")
            continue
        custom_id, body = obj.get("custom_id"), obj.get("body")
        unknown = sorted(set(obj) - {"custom_id", "method", "url", "body"})
        if unknown:
            error("invalid_request", number, f"unknown field {unknown[0]!r}", unknown[0])
        elif not isinstance(custom_id, str) or not 0 < len(custom_id) <= MAX_CUSTOM_ID:
            message = f"custom_id must be a string of 1 to {MAX_CUSTOM_ID} characters"
            error("invalid_request", number, message, "custom_id")
        elif custom_id in seen:
            error("duplicate_custom_id", number,
                  f"custom_id {custom_id!r} is used by an earlier line", "custom_id")  # fmt: skip
        elif obj.get("method") != "POST":
            error("invalid_request", number, "method must be 'POST'", "method")
        elif obj.get("url") != endpoint:
            message = f"url {obj.get('url')!r} is not the batch's endpoint {endpoint!r}"
            error("invalid_url", number, message, "url")
        elif not isinstance(body, dict):
            error("invalid_request", number, "body must be a JSON object", "body")
        elif body.get("stream"):
            error("invalid_request", number, "stream: not supported in a batch", "body.stream")
        else:
            seen.add(custom_id)
            lines.append(BatchLine(custom_id, endpoint, _encode.encode(body)))
    if not lines and not errors:
        error("empty_file", None, "the input file has no requests")
    if len(lines) > max_lines:
        error("too_many_requests", None,
              f"{len(lines)} requests, over {max_lines} (--max-batch-requests)")  # fmt: skip
    return lines, errors


def batch_status(job: BatchJob) -> str:
    if job.info.get("errors"):
        return "failed"
    if job.status == CANCELING:
        return "cancelling"
    if job.status != ENDED:
        return "in_progress"
    if job.cancel_at is not None:
        return "cancelled"
    return "expired" if job.tally[EXPIRED] else "completed"


def batch_card(job: BatchJob, model: str) -> dict[str, Any]:
    """The Batch object OpenAI's client parses."""
    status, info, counts = batch_status(job), job.info, job.counts()
    created, ended = int(job.created_at), None if job.ended_at is None else int(job.ended_at)
    usage = job.usage
    return {
        "id": job.id, "object": "batch", "endpoint": info["endpoint"], "model": model,
        "errors": {"object": "list", "data": info["errors"]} if info.get("errors") else None,
        "input_file_id": info["input_file_id"], "completion_window": "24h", "status": status,
        "output_file_id": info.get("output_file_id"), "error_file_id": info.get("error_file_id"),
        "created_at": created, "in_progress_at": None if status == "failed" else created,
        "expires_at": int(job.expires_at),
        "finalizing_at": ended if status in ("completed", "expired") else None,
        "completed_at": ended if status == "completed" else None,
        "failed_at": ended if status == "failed" else None,
        "expired_at": ended if status == "expired" else None,
        "cancelling_at": None if job.cancel_at is None else int(job.cancel_at),
        "cancelled_at": ended if status == "cancelled" else None,
        "request_counts": {"total": len(job.lines), "completed": counts[SUCCEEDED],
                           "failed": len(job.lines) - counts[SUCCEEDED] - counts["processing"]},
        "usage": {"input_tokens": usage.input_tokens,
                  "input_tokens_details": {"cached_tokens": usage.cached_tokens},
                  "output_tokens": usage.output_tokens,
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage.input_tokens + usage.output_tokens},
        "metadata": info.get("metadata"),
    }  # fmt: skip


def result_files(job: BatchJob) -> tuple[bytes, bytes]:
    """(output file, error file) of an ended job: JSONL, input order; b"" for none."""
    out: list[bytes] = []
    err: list[bytes] = []
    for line, result in zip(job.lines, job.results, strict=True):
        assert result is not None, "an ended job has every line's result"
        entry: dict[str, Any] = {"id": "batch_req_" + uuid.uuid4().hex, "custom_id": line.custom_id}
        if result.status:
            answer = json_or_message(result.body)
            entry["response"] = {"status_code": result.status, "request_id": result.request_id,
                                 "body": answer}  # fmt: skip
            entry["error"] = None
        else:
            never = {CANCELED: "batch_cancelled", EXPIRED: "batch_expired"}[result.outcome]
            entry["response"] = None
            entry["error"] = {"code": never, "message": f"the request did not run: {never}"}
        (out if result.outcome == SUCCEEDED else err).append(_encode.encode(entry))
    return b"".join(x + b"\n" for x in out), b"".join(x + b"\n" for x in err)


def json_or_message(body: bytes) -> Any:
    """A route's answer as JSON to embed: itself when it is JSON, else its text as an error
    message (no route here answers other than JSON; this keeps a result file JSONL)."""
    try:
        _decode_line.decode(body)
    except msgspec.DecodeError:
        return {"error": {"message": body.decode("utf-8", "replace")}}
    return msgspec.Raw(body)
