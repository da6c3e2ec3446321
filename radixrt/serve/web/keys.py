"""API keys, tenants and roles: who a request is, and which cache namespace it may use.

A key file (`--api-key-file`) is JSON, `{"keys": [{"key": ..., "tenant": ..., "role": ...}]}`:
`key` is the secret itself or `"sha256:<hex>"` of it (`radixrt keys add` writes hashed
entries), `role` is `user` (the default) or `admin`. Keys are compared as SHA-256 digests in
constant time, against every entry (no early exit). The file is re-read on SIGHUP; a file
that no longer parses leaves the keys as they were (and says why in the log).

A single key (`--api-key` or `RADIXRT_API_KEY`) is an admin of no tenant: one operator, one
shared cache, as without keys. With a key file every request has a tenant, and its prefix
cache namespace starts with that tenant (unless `--shared-prefix-cache`), so no tenant can
match, or time, another's prompts.

A service key (`--service-key-file`, one line of 16 or more characters, on the router and its
workers alike) is what a front end that checked its own clients' keys presents to a worker:
only with it does the worker believe the tenant and role it names in `x-radixrt-tenant` and
`x-radixrt-role` (none named: an admin of no tenant, the router's own calls).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("radixrt")

ROLES = ("user", "admin")
TENANT_HEADER = "x-radixrt-tenant"  # read only from a request that carries the service key
ROLE_HEADER = "x-radixrt-role"
MIN_SERVICE_KEY_LEN = 16
_TENANT = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
_SEP = "\x1f"  # between a namespace's tenant and its salt; never in a tenant name


@dataclass(frozen=True, slots=True)
class Identity:
    """Who sent a request: a tenant (None: no tenants, one shared cache) and a role."""

    tenant: str | None
    role: str = "admin"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def caller(self) -> str | None:
        """The owner of the request's ids (None: decided by the key or the address)."""
        return None if self.tenant is None else "tenant:" + self.tenant

    def own_prefix(self, shared: bool = False) -> str | None:
        """What every namespace of this caller starts with; None: it cannot be told (no
        tenants: a salt is anyone's who knows it; or a cache shared by tenants), so only the
        request's own namespace is the caller's."""
        if self.tenant is None or shared:
            return None
        return self.tenant + _SEP

    def namespace(self, salt: str | None, shared: bool = False) -> str | None:
        """The prefix-cache namespace of a request with `salt` (a client's cache_salt or
        extra_key): the tenant's own unless the cache is `shared` across tenants."""
        if self.tenant is None or shared:
            return salt
        return self.tenant + _SEP + (salt or "")


OPEN = Identity(None, "admin")  # no keys configured: everyone, as before tenants existed


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names the file and the problem."""


class KeyRing:
    """The keys a server accepts: digest -> identity."""

    def __init__(self, entries: list[tuple[bytes, Identity]]) -> None:
        self._entries = entries

    @classmethod
    def single(cls, key: str) -> KeyRing:
        return cls([(_digest(key), OPEN)])

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise KeyFileError(f"cannot read the key file {path}: {e}") from None
        keys = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(keys, list) or not keys:
            raise KeyFileError(f'{path}: expected {{"keys": [{{"key": ..., "tenant": ...}}]}}')
        entries = [_entry(path, i, item) for i, item in enumerate(keys)]
        digests = [d for d, _ in entries]
        if len(set(digests)) != len(digests):
            raise KeyFileError(f"{path}: the same key is listed twice")
        return cls(entries)

    def lookup(self, token: str) -> Identity | None:
        """The identity of a presented key, or None."""
        given = _digest(token)
        found = None
        for digest, identity in self._entries:
            if hmac.compare_digest(given, digest):
                found = identity
        return found

    @property
    def has_tenants(self) -> bool:
        return any(identity.tenant is not None for _, identity in self._entries)


def read_service_key(path: str | Path) -> str:
    """The service key in `path` (its one line); KeyFileError when it cannot be used."""
    try:
        key = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise KeyFileError(f"cannot read the service key file {path}: {e}") from None
    if len(key) < MIN_SERVICE_KEY_LEN or any(c.isspace() for c in key):
        raise KeyFileError(f"{path}: the service key must be one line of at least "
                           f"{MIN_SERVICE_KEY_LEN} characters, without spaces")  # fmt: skip
    return key


def service_identity(tenant: str | None, role: str | None) -> Identity:
    """Whom a service call acts for, from its headers; KeyFileError names a bad one."""
    if role is not None and role not in ROLES:
        raise KeyFileError(f"{ROLE_HEADER} must be one of {ROLES}")
    if tenant is None:
        return Identity(None, role or "admin")
    if not _TENANT.fullmatch(tenant):
        raise KeyFileError(f"{TENANT_HEADER} must be 1-64 of A-Z a-z 0-9 . _ -")
    return Identity(tenant, role or "user")


def hash_key(key: str) -> str:
    """The `sha256:<hex>` form of a key, as a key file may store it."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _entry(path: str | Path, i: int, item: object) -> tuple[bytes, Identity]:
    where = f"{path}: keys[{i}]"
    if not isinstance(item, dict):
        raise KeyFileError(f"{where} must be an object")
    unknown = set(item) - {"key", "tenant", "role"}
    if unknown:
        raise KeyFileError(f"{where} has unknown fields {sorted(unknown)}")
    key, tenant, role = item.get("key"), item.get("tenant"), item.get("role", "user")
    if not isinstance(key, str) or not key:
        raise KeyFileError(f"{where}: key must be a non-empty string")
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise KeyFileError(f"{where}: tenant must be 1-64 of A-Z a-z 0-9 . _ -")
    if role not in ROLES:
        raise KeyFileError(f"{where}: role must be one of {ROLES}")
    if key.startswith("sha256:"):
        if not _SHA256.fullmatch(key):
            raise KeyFileError(f"{where}: a hashed key is sha256: and 64 lowercase hex digits")
        digest = bytes.fromhex(key.removeprefix("sha256:"))
    else:
        digest = _digest(key)
    return digest, Identity(tenant, role)


class KeyStore:
    """The server's current KeyRing, re-read from its file on `reload` (SIGHUP), and the
    digest of its service key (None: none)."""

    def __init__(
        self, ring: KeyRing, path: str | Path | None = None, service_key: str | None = None
    ) -> None:
        self.ring = ring
        self.path = path
        self.service = None if service_key is None else _digest(service_key)

    def is_service(self, token: str) -> bool:
        return self.service is not None and hmac.compare_digest(_digest(token), self.service)

    def reload(self) -> bool:
        """Re-read the key file; on error keep the keys in use. True if it took effect."""
        if self.path is None:
            return False
        try:
            self.ring = KeyRing.from_file(self.path)
        except KeyFileError as e:
            logger.error("keys not reloaded (the old ones stay in use): %s", e)
            return False
        logger.info("reloaded the API keys from %s", self.path)
        return True
