"""Files (OpenAI's /v1/files): uploaded batch inputs and the batches' output and error files,
kept in memory per owner (tenant, "" without tenants) until deleted or expired.

Bounds: an upload is a request body (--max-request-bytes); an owner's files together hold
at most --max-stored-file-bytes, past which uploads are refused; a batch's output and error
files are always written, the owner's oldest batch outputs dropped to make room."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from radixrt.serve.http.api.batches.jobs import BatchNotFoundError
from radixrt.serve.http.protocol import BadRequestError

MIN_FILE_BYTES = 4096  # what a file counts against the bound at least
# OpenAI's purposes; only "batch" files feed a batch, "batch_output" ones are written by one.
PURPOSES = ("assistants", "assistants_output", "batch", "batch_output", "fine-tune",
            "fine-tune-results", "vision", "user_data", "evals")  # fmt: skip


@dataclass(frozen=True, slots=True, eq=False)
class StoredFile:
    id: str
    owner: str
    filename: str
    purpose: str
    data: bytes
    created_at: int
    expires_at: int | None = None

    def card(self) -> dict[str, Any]:
        """The File object OpenAI's client parses."""
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "expires_at": self.expires_at,
                "filename": self.filename, "purpose": self.purpose,
                "status": "processed", "status_details": None}  # fmt: skip


class FileStore:
    def __init__(self, max_bytes_per_owner: int) -> None:
        self.max_bytes_per_owner = max_bytes_per_owner
        self._owners: dict[str, OrderedDict[str, StoredFile]] = {}

    def add(
        self,
        owner: str,
        filename: str,
        purpose: str,
        data: bytes,
        expires_after_s: int | None = None,
        written: bool = False,
    ) -> StoredFile:
        """Keep a file. An upload (`written` False) past the owner's bound is a 400; a file a
        batch writes first makes room by dropping the owner's oldest batch outputs (kept past
        the bound only when nothing but uploads is left to drop)."""
        if purpose not in PURPOSES:
            raise BadRequestError(f"purpose: {purpose!r} is not one of {', '.join(PURPOSES)}")
        held = self.nbytes(owner)
        if not written and held + max(len(data), MIN_FILE_BYTES) > self.max_bytes_per_owner:
            raise BadRequestError(
                f"file storage is full: this tenant's files hold {held} bytes and this one has "
                f"{len(data)}, over {self.max_bytes_per_owner} (--max-stored-file-bytes); "
                "delete files first"
            )
        if written:  # (held and need: as nbytes counts them)
            mine, need = self._owners.get(owner, OrderedDict()), max(len(data), MIN_FILE_BYTES)
            outputs = [f for f in mine.values() if f.purpose == "batch_output"]
            while outputs and held + need > self.max_bytes_per_owner:
                gone = outputs.pop(0)
                held -= max(len(gone.data), MIN_FILE_BYTES)
                del mine[gone.id]
        now = int(time.time())
        expires = None if expires_after_s is None else now + expires_after_s
        stored = StoredFile(
            "file-" + uuid.uuid4().hex, owner, filename, purpose, data, now, expires
        )
        self._owners.setdefault(owner, OrderedDict())[stored.id] = stored
        return stored

    def get(self, owner: str, file_id: str) -> StoredFile:
        self._expire(owner)
        mine = self._owners.get(owner)
        found = None if mine is None else mine.get(file_id)
        if found is None:
            raise BatchNotFoundError(f"No such File object: {file_id}")
        return found

    def list(self, owner: str) -> list[StoredFile]:
        """The owner's files, oldest first."""
        self._expire(owner)
        return list(self._owners.get(owner, {}).values())

    def delete(self, owner: str, file_id: str) -> None:
        self.get(owner, file_id)
        del self._owners[owner][file_id]

    def nbytes(self, owner: str) -> int:
        """The owner's files' bytes, each counted as at least MIN_FILE_BYTES (so many tiny
        files cannot hold unbounded memory either)."""
        mine = self._owners.get(owner)
        return 0 if mine is None else sum(max(len(f.data), MIN_FILE_BYTES) for f in mine.values())

    def _expire(self, owner: str) -> None:
        mine, now = self._owners.get(owner), time.time()
        if mine is None:
            return
        for stored in list(mine.values()):
            if stored.expires_at is not None and stored.expires_at <= now:
                del mine[stored.id]
