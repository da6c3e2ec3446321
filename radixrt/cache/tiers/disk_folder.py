"""The disk tier's folder: who may own it, its MAC key, where a block's file lives, how a file
is opened for reading, and the listing done at start.

`<cache_dir>/block.key` (KEY_BYTES random bytes, mode 0600) and, under a root per model
fingerprint (disk.py), `<root>/<hash[:2]>/<hash>.kv`; temporaries are `<hash>.kv.<pid>.<n>.tmp`
beside their final name. Nothing under the folder is trusted: it must belong to this user and
be writable by nobody else (`check_private`), links and special files are never followed or
read, and a file larger than a block file can be is refused before a byte of it is allocated.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from pathlib import Path

from radixrt.cache.tiers.disk_format import KEY_BYTES, BlockFileError

STALE_TMP_S = 3600.0  # a .tmp this old belongs to no live writer
KEY_FILE = "block.key"
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def check_private(folder: Path) -> None:
    """ValueError, naming `folder`, unless it is a directory this user owns that neither group
    nor others may write (anyone who can write there can plant or delete KV blocks)."""
    st = os.stat(folder)  # the folder itself may be a link the operator made
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{folder} is not a directory")
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is not None and st.st_uid != uid:
        raise ValueError(
            f"{folder} belongs to uid {st.st_uid}, not to this user (uid {uid}): give a folder "
            f"of your own"
        )
    if st.st_mode & 0o022:
        raise ValueError(
            f"{folder} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): "
            f"run `chmod go-w {folder}` or give a private folder"
        )


def block_key(folder: Path) -> bytes:
    """The folder's MAC key, made (mode 0600, atomically) the first time; ValueError if the
    key file is not a regular file of this user, readable by others, or of the wrong size."""
    path = folder / KEY_FILE
    if not os.path.lexists(path):
        tmp = folder / f"{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(tmp, path)  # never replaces a key another process made meanwhile
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        raise ValueError(f"{path}: cannot be opened ({e}); is it a link?") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise ValueError(f"{path} must be a regular file of mode 0600")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise ValueError(f"{path} belongs to uid {st.st_uid}, not to this user")
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key")
    return key


def read_block_file(path: Path, max_bytes: int) -> bytearray:
    """The bytes of the regular file at `path`, refused (BlockFileError) when it is a link, a
    FIFO, a device or any other special file, or larger than `max_bytes`; OSError as open
    raises it (FileNotFoundError when it is gone). Never blocks on a FIFO."""
    fd = os.open(path, _READ_FLAGS)
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BlockFileError("not a regular file")
        if st.st_size > max_bytes:
            raise BlockFileError(f"{st.st_size} bytes, more than a block file's {max_bytes}")
        raw = bytearray(st.st_size)
        got = f.readinto(raw)
    if got != len(raw):
        raise BlockFileError(f"short read: {got} of {len(raw)} bytes")
    return raw


def block_file(root: Path, key: bytes) -> Path:
    h = key.hex()
    return root / h[:2] / f"{h}.kv"


def regular_size(path: Path) -> int | None:
    """The size of the regular file at `path` (a link is not followed); None otherwise."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def scan_folder(root: Path) -> list[tuple[bytes, int]]:
    """(key, file bytes) of every regular block file under `root`, least recently written
    first; reads names and sizes only. Removes temporaries older than STALE_TMP_S."""
    found: list[tuple[float, bytes, int]] = []
    now = time.time()
    for sub in subdirs(root):
        for entry in os.scandir(sub):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.name.endswith(".tmp"):
                if now - st.st_mtime > STALE_TMP_S:
                    unlink(Path(entry.path))
            elif entry.name.endswith(".kv") and len(entry.name) == 67:
                if not stat.S_ISREG(st.st_mode):
                    continue  # a link or special file: never indexed, never read
                try:
                    found.append((st.st_mtime, bytes.fromhex(entry.name[:64]), st.st_size))
                except ValueError:
                    continue
    found.sort()
    return [(key, size) for _, key, size in found]


def subdirs(root: Path) -> list[str]:
    """The two-letter folders under `root` (none when it is gone; links are not followed)."""
    try:
        return [
            e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False) and len(e.name) == 2
        ]
    except FileNotFoundError:
        return []


def unlink(path: Path) -> None:
    """Remove `path` if it is there (another process may have removed it first)."""
    try:
        os.unlink(path)
    except OSError:
        pass
