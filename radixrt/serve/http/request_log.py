"""`--request-log FILE`: one JSON line per finished request, for `radixrt cost` to replay
(docs/sizing-and-cost.md), without the prompt's text.

A line: time, tenant, endpoint, prompt / cached / output token counts, the cache markers the
request asked for (its pins: Anthropic breakpoints, OpenAI retention, handles), time to first
token and to the end, and `prefix_hashes`: a chain over the prompt's whole blocks of `block`
tokens, h[i] = sha256(h[i-1] + tokens of block i) cut to 16 hex digits, h[-1] = the
deployment's salt. Two prompts share their first k blocks exactly when their first k hashes
are equal; the salt (FILE.salt, made once, kept across restarts) keeps the hashes from being a
dictionary of common prompts; a salt file that is empty or too short is refused at start.
The file is rotated by size (FILE.1, FILE.2, ... up to `keep`); a rotation that fails is
logged and retried a minute later, and lines keep going to the open file meanwhile. A partial
last line (a crash mid-write) is closed with a newline at start, so the next record is whole.
Written on the event loop's thread, a line at a time.
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

from radixrt.serve.results.state import ReqOutput

logger = logging.getLogger("radixrt")

BLOCK = 128  # tokens per hashed block
SALT_BYTES = 16  # made this long; a shorter salt file is refused
ROTATE_RETRY_S = 60.0  # after a failed rotation, the next try


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
        self._file: IO[str] = _open_appending(self.path)
        self._rotate_after = 0.0  # monotonic; later after a failed rotation

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
        if self._file.tell() >= self.max_bytes and time.monotonic() >= self._rotate_after:
            try:
                self._rotate()
            except OSError as e:  # the open file stays: no line is lost
                self._rotate_after = time.monotonic() + ROTATE_RETRY_S
                logger.warning("could not rotate the request log %s (%s); still writing to "
                               "the open file, next try in %.0f s", self.path, e,
                               ROTATE_RETRY_S)  # fmt: skip

    def _rotate(self) -> None:
        """FILE.i -> FILE.i+1, FILE -> FILE.1, a new FILE; the open file is closed only once
        the new one is open (until then, lines still go to it, whatever its name)."""
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        new = _open_appending(self.path)
        self._file.close()
        self._file = new


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
    """The deployment's salt: read from `path`, made there (owner-only, written whole before
    it takes the name) the first time; ValueError if the file holds no usable salt."""
    if not os.path.lexists(path):
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_bytes(SALT_BYTES).hex())
        try:
            os.link(tmp, path)  # never replaces a salt made meanwhile
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    text = path.read_text().strip()
    try:
        salt = bytes.fromhex(text)
    except ValueError:
        salt = b""
    if len(salt) < SALT_BYTES:
        raise ValueError(
            f"the salt file {path} holds no salt of at least {SALT_BYTES} bytes in hex "
            f"({len(text)} characters); remove it to make a new one (the prefix hashes of "
            f"earlier logs then no longer match new ones)"
        )
    return salt


def _open_appending(path: Path) -> IO[str]:
    """`path` opened for appending; a partial last line (a crash mid-write) is closed first."""
    partial = False
    try:
        with open(path, "rb") as f:
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                partial = f.read(1) != b"\n"
    except FileNotFoundError:
        pass
    out = open(path, "a", encoding="utf-8")  # noqa: SIM115
    if partial:
        out.write("\n")
        out.flush()
        logger.warning("request log %s ended in a partial line (a crash mid-write?); closed it",
                       path)  # fmt: skip
    return out
