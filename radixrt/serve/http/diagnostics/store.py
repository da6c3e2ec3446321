"""The fingerprints of answered chat-like requests, by tenant and response id, bounded in count
and bytes per tenant (the oldest goes first). Another tenant's ids are not found.

Ownership: the serving pipeline's, on the event loop only (no lock); an entry is written once,
when its request finished, and is never changed.
"""

from __future__ import annotations

from collections import OrderedDict

from radixrt.serve.http.diagnostics.fingerprint import Fingerprint


class FingerprintStore:
    """Fingerprints by owner (a tenant, "" without tenants), oldest first."""

    def __init__(self, max_per_owner: int, max_bytes_per_owner: int) -> None:
        if max_per_owner < 1 or max_bytes_per_owner < 1:
            raise ValueError("a fingerprint store keeps at least one entry and one byte")
        self.max_per_owner = max_per_owner
        self.max_bytes_per_owner = max_bytes_per_owner
        self._owners: dict[str, OrderedDict[str, Fingerprint]] = {}
        self._bytes: dict[str, int] = {}

    def get(self, owner: str, response_id: str) -> Fingerprint | None:
        """The fingerprint kept under `response_id` for `owner`; None if none (never kept,
        evicted, or another owner's)."""
        entries = self._owners.get(owner)
        return None if entries is None else entries.get(response_id)

    def put(self, owner: str, response_id: str, fp: Fingerprint) -> None:
        """Keep `fp`; then evict `owner`'s oldest past either bound (one larger than the byte
        bound alone is not kept)."""
        entries = self._owners.setdefault(owner, OrderedDict())
        old = entries.pop(response_id, None)
        used = self._bytes.get(owner, 0) - (0 if old is None else old.nbytes)
        entries[response_id] = fp
        used += fp.nbytes
        while entries and (len(entries) > self.max_per_owner or used > self.max_bytes_per_owner):
            _, gone = entries.popitem(last=False)
            used -= gone.nbytes
        self._bytes[owner] = used
        if not entries:
            del self._owners[owner], self._bytes[owner]

    def count(self, owner: str) -> int:
        return len(self._owners.get(owner, ()))

    def nbytes(self, owner: str) -> int:
        return self._bytes.get(owner, 0)
