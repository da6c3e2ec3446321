"""`--request-log FILE`: one JSON line per finished request, for `radixrt cost` to replay
(docs/sizing-and-cost.md), without the prompt's text.

A line: time, tenant, endpoint, prompt / cached / output token counts, the cache markers the
request asked for (its pins: Anthropic breakpoints, OpenAI retention, handles), time to first
token and to the end, and `prefix_hashes`: a chain over the prompt's whole blocks of `block`
tokens, h[i] = sha256(h[i-1] + tokens of block i) cut to 16 hex digits, h[-1] = the
deployment's salt. Two prompts share their first k blocks exactly when their first k hashes
are equal; the salt (FILE.salt, made once, kept across restarts) keeps the hashes from being a
dictionary of common prompts. The file is rotated by size (FILE.1, FILE.2, ... up to
`keep`). Written on the event loop's thread, a line at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import struct
import time
from pathlib import Path
from typing import IO, Any

from radixrt.output.state import ReqOutput

logger = logging.getLogger("radixrt")

BLOCK = 128  # tokens per hashed block


def prefix_hashes(ids: list[int], salt: bytes, block: int = BLOCK) -> list[str]:
    """The chained hashes of `ids`' whole blocks (a last partial block is not hashed)."""
    out: list[str] = []
    prev = salt
    for start in range(0, len(ids) - block + 1, block):
        chunk = struct.pack(f"<{block}q", *ids[start : start + block])
        prev = hashlib.sha256(prev + chunk).digest()[:8]
        out.append(prev.hex())
    return out


class RequestLog:
    """A RequestObserver writing one line per finished request."""

    def __init__(self, path: str, max_bytes: int, keep: int = 3) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.salt = _salt(self.path.with_name(self.path.name + ".salt"))
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def observe_first_token(self, seconds: float) -> None:
        pass

    def observe_finished(self, req: ReqOutput, seconds: float) -> None:
        try:
            self._write(self.record(req, seconds))
        except OSError:
            logger.exception("could not write the request log %s", self.path)

    def record(self, req: ReqOutput, seconds: float) -> dict[str, Any]:
        tenant = req.caller.removeprefix("tenant:") if req.caller.startswith("tenant:") else None
        ttft = None
        if req.first_token_time is not None:
            ttft = round(req.first_token_time - req.arrival_time, 4)
        return {
            "time": round(time.time(), 3),
            "tenant": tenant,
            "endpoint": req.endpoint,
            "prompt_tokens": req.prompt_len,
            "cached_tokens": req.cached_tokens,
            "output_tokens": len(req.output_ids),
            "block": BLOCK,
            "prefix_hashes": prefix_hashes(req.input_ids, self.salt),
            "pins": [
                {
                    "offset": p.offset,
                    "ttl_s": p.ttl_s,
                    "sliding": p.sliding,
                    "handle": (p.pin_id or "").startswith("handle-"),
                }
                for p in req.pin_specs
            ],
            "ttft_s": ttft,
            "e2e_s": round(seconds, 4),
        }

    def close(self) -> None:
        self._file.close()

    def _write(self, rec: dict[str, Any]) -> None:
        self._file.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._file.flush()
        if self._file.tell() >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115


class NoRequestLog:
    """No --request-log: observes nothing."""

    def observe_first_token(self, seconds: float) -> None:
        pass

    def observe_finished(self, req: ReqOutput, seconds: float) -> None:
        pass

    def close(self) -> None:
        pass


def open_request_log(config: Any) -> RequestLog | NoRequestLog:
    """The server's request log (ServerConfig.request_log), or the null one."""
    if config.request_log is None:
        return NoRequestLog()
    try:
        return RequestLog(config.request_log, config.request_log_max_mb * 2**20)
    except (OSError, ValueError) as e:
        raise ValueError(f"--request-log {config.request_log}: {e}") from None


def _salt(path: Path) -> bytes:
    """The deployment's salt: read from `path`, made there (owner-only) the first time."""
    if path.exists():
        return bytes.fromhex(path.read_text().strip())
    salt = secrets.token_bytes(16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(salt.hex())
    return salt
