"""Key files, identities and namespaces (radixrt/serve/web/keys.py), `radixrt keys`, and the
scheduler's wait for a shared prefill staying inside a namespace; no server runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radixrt.core import Req, SamplingParams
from radixrt.scheduler.admission import shares_uncached_prefix
from radixrt.serve.web.keys import OPEN, Identity, KeyFileError, KeyRing, KeyStore, hash_key
from radixrt.serve.web.keys_cli import main as keys_main


def _file(tmp_path: Path, keys: object) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return path


def test_plain_and_hashed_keys_name_their_tenant_and_role(tmp_path) -> None:
    path = _file(
        tmp_path,
        [
            {"key": "plain", "tenant": "a"},
            {"key": hash_key("hashed"), "tenant": "b", "role": "admin"},
        ],
    )
    ring = KeyRing.from_file(path)
    assert ring.lookup("plain") == Identity("a", "user")
    assert ring.lookup("hashed") == Identity("b", "admin")
    assert ring.lookup(hash_key("hashed")) is None  # the digest itself is not a key
    assert ring.lookup("") is None and ring.lookup("plain ") is None
    assert ring.has_tenants and not KeyRing.single("k").has_tenants
    assert KeyRing.single("k").lookup("k") == OPEN


@pytest.mark.parametrize(
    "keys, fragment",
    [
        ([], "expected"),
        ([{"key": "k"}], "tenant must be"),
        ([{"key": "k", "tenant": "a/b"}], "tenant must be"),
        ([{"key": "k", "tenant": "a", "role": "root"}], "role must be"),
        ([{"key": "", "tenant": "a"}], "key must be"),
        ([{"key": "sha256:abc", "tenant": "a"}], "64 lowercase hex"),
        ([{"key": "k", "tenant": "a", "extra": 1}], "unknown fields"),
        ([{"key": "k", "tenant": "a"}, {"key": "k", "tenant": "b"}], "listed twice"),
        (["k"], "must be an object"),
    ],
)
def test_a_bad_key_file_names_the_problem(tmp_path, keys, fragment) -> None:
    with pytest.raises(KeyFileError, match=fragment):
        KeyRing.from_file(_file(tmp_path, keys))


def test_unreadable_files_are_refused(tmp_path) -> None:
    with pytest.raises(KeyFileError, match="cannot read"):
        KeyRing.from_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(KeyFileError, match="cannot read"):
        KeyRing.from_file(tmp_path / "bad.json")


def test_reload_keeps_the_old_keys_when_the_file_breaks(tmp_path) -> None:
    path = _file(tmp_path, [{"key": "one", "tenant": "a"}])
    store = KeyStore(KeyRing.from_file(path), path)
    _file(tmp_path, [{"key": "two", "tenant": "a"}])
    assert store.reload() and store.ring.lookup("two") and not store.ring.lookup("one")
    path.write_text("not json")
    assert not store.reload() and store.ring.lookup("two")


def test_namespaces_separate_tenants_and_salts() -> None:
    a, b = Identity("a", "user"), Identity("b", "user")
    assert a.namespace(None) != b.namespace(None)
    assert a.namespace("s") != a.namespace(None) != a.namespace("t")
    assert a.namespace("s", shared=True) == b.namespace("s", shared=True) == "s"
    assert OPEN.namespace(None) is None and OPEN.namespace("s") == "s"
    # A salt cannot reach into another tenant's namespace: tenant names have no separator.
    assert not any(b.namespace(salt) == a.namespace(None) for salt in ("", "a", "\x1fa"))
    assert a.caller == "tenant:a" and OPEN.caller is None


def test_keys_add_writes_a_hashed_entry_and_list_shows_no_secret(tmp_path, capsys) -> None:
    path = tmp_path / "keys.json"
    assert keys_main(["add", str(path), "--tenant", "a"]) == 0
    secret = capsys.readouterr().out.strip()
    assert len(secret) == 64
    assert keys_main(["add", str(path), "--tenant", "ops", "--role", "admin", "--key", "s"]) == 0
    capsys.readouterr()
    ring = KeyRing.from_file(path)
    assert ring.lookup(secret) == Identity("a", "user") and ring.lookup("s").is_admin
    assert secret not in path.read_text()
    assert path.stat().st_mode & 0o077 == 0
    assert keys_main(["list", str(path)]) == 0
    out = capsys.readouterr().out
    assert out == "a\tuser\nops\tadmin\n" and secret not in out
    assert keys_main(["add", str(path), "--tenant", "bad name"]) == 2  # refused; file kept
    assert KeyRing.from_file(path).lookup(secret) is not None


def _req(rid: str, ids: list[int], extra_key: str | None, kv_len: int = 0) -> Req:
    req = Req(rid, ids, SamplingParams(max_new_tokens=1), extra_key=extra_key)
    req.kv_len = kv_len
    return req


def test_a_request_waits_only_on_a_prefill_of_its_own_namespace() -> None:
    ids = list(range(100))
    admitted = [_req("a", ids, "tenant-a")]
    assert shares_uncached_prefix(_req("a2", ids, "tenant-a"), admitted)
    assert not shares_uncached_prefix(_req("b", ids, "tenant-b"), admitted)
    assert not shares_uncached_prefix(_req("c", ids, None), admitted)
