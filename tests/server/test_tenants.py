"""Two tenants on one server (tiny random model, --api-key-file): separate prefix caches,
cache_salt, ownership of rids, admin-only endpoints, the per-tenant limit, SIGHUP reload, and
--shared-prefix-cache; the pool whole after each test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from radixrt.serve.web.keys import hash_key

from .server_proc import start_server

KEYS = {"a": "key-of-a", "b": "key-of-b", "ops": "key-of-ops"}
# A prompt long enough to cache (several hundred tokens of the tiny model's tokenizer).
SECRET = "The system prompt of tenant A: " + " ".join(f"rule {i} is kept." for i in range(60))


def _write_keys(path: Path, extra: dict[str, str] | None = None) -> None:
    entries = [
        {"key": hash_key(KEYS["a"]), "tenant": "a"},
        {"key": KEYS["b"], "tenant": "b", "role": "user"},
        {"key": hash_key(KEYS["ops"]), "tenant": "ops", "role": "admin"},
    ]
    for tenant, key in (extra or {}).items():
        entries.append({"key": hash_key(key), "tenant": tenant})
    path.write_text(json.dumps({"keys": entries}))


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS.get(who, who)}"}


@pytest.fixture(scope="module")
def tenants(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tenants")
    _write_keys(tmp / "keys.json")
    server = start_server(
        tiny_llama_path,
        tmp,
        "--api-key-file",
        str(tmp / "keys.json"),
        "--max-requests-per-tenant",
        "3",
        "--max-tokens-per-tenant",
        "1250",  # three 400-token outputs fit, with their short prompts
        "--enable-metrics",
        "--max-running-requests",
        "1",  # requests queue, so three long ones stay in flight for a while
    )
    server.headers = _auth("ops")
    server.key_file = tmp / "keys.json"
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _gen(server: Any, who: str, text: str = SECRET, **extra: Any) -> dict[str, Any]:
    sp = {"max_new_tokens": 1, "temperature": 0}
    r = httpx.post(
        server.url + "/generate",
        json={"text": text, "sampling_params": sp, **extra},
        headers=_auth(who),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def test_a_tenant_never_sees_another_tenants_cache(tenants) -> None:
    _gen(tenants, "a")
    hit = _gen(tenants, "a")["cached_tokens"]
    assert hit > 100
    assert _gen(tenants, "b")["cached_tokens"] == 0  # B's guess at A's prompt: no oracle
    assert _gen(tenants, "b")["cached_tokens"] == hit  # B's own copy from now on
    tenants.wait_idle_and_whole()


def test_cache_salt_splits_one_tenants_cache(tenants) -> None:
    text = SECRET + " salted"
    _gen(tenants, "a", text, cache_salt="s1")
    assert _gen(tenants, "a", text, cache_salt="s2")["cached_tokens"] == 0
    assert _gen(tenants, "a", text, cache_salt="s1")["cached_tokens"] > 100
    body = {"model": "m", "prompt": text, "max_tokens": 1, "cache_salt": "s1"}
    r = httpx.post(tenants.url + "/v1/completions", json=body, headers=_auth("a"), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
    body["cache_salt"] = "s3"
    r = httpx.post(tenants.url + "/v1/completions", json=body, headers=_auth("a"), timeout=60)
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    r = httpx.post(
        tenants.url + "/generate",
        json={"text": "x", "cache_salt": "p", "extra_key": "q"},
        headers=_auth("a"),
    )
    assert r.status_code == 400 and "not both" in r.text
    tenants.wait_idle_and_whole()


def test_keys_are_checked(tenants) -> None:
    assert httpx.get(tenants.url + "/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": KEYS["a"]}):
        r = httpx.post(tenants.url + "/generate", json={"text": "x"}, headers=headers)
        assert r.status_code == 401, r.text


def test_admin_endpoints_refuse_users(tenants) -> None:
    for who in ("a", "b"):
        assert httpx.get(tenants.url + "/get_server_info", headers=_auth(who)).status_code == 403
        assert httpx.get(tenants.url + "/metrics", headers=_auth(who)).status_code == 403
        r = httpx.post(tenants.url + "/flush_cache", headers=_auth(who))
        assert r.status_code == 403 and "admin" in r.text
    assert httpx.get(tenants.url + "/get_server_info", headers=_auth("ops")).status_code == 200
    assert httpx.get(tenants.url + "/metrics", headers=_auth("ops")).status_code == 200
    assert httpx.get(tenants.url + "/get_model_info", headers=_auth("a")).status_code == 200


def _finish_after_abort(server: Any, rid: str, aborter: str) -> str:
    """A's streamed request `rid`; once its first tokens arrive, `aborter` aborts `rid`.
    The finish reason A's stream ends with."""
    sp = {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0}
    body = {"text": "Count:", "sampling_params": sp, "rid": rid, "stream": True}
    reason = ""
    with httpx.stream(
        "POST", server.url + "/generate", json=body, headers=_auth("a"), timeout=120
    ) as r:
        for line in r.iter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data:"))
            if not reason:  # the first event: the request is running
                a = httpx.post(
                    server.url + "/abort_request", json={"rid": rid}, headers=_auth(aborter)
                )
                assert a.json() == {"success": True}
            reason = event["meta_info"]["finish_reason"] or "running"
    return reason["type"] if isinstance(reason, dict) else reason


def test_a_tenant_aborts_only_its_own_requests(tenants) -> None:
    for who in ("b", "ops"):  # another tenant, even an admin: the same answer, no effect
        assert _finish_after_abort(tenants, f"job-{who}", who) == "length"
    # A's own abort lands within a few tokens; the tiny model writes 400 in ~0.3 s, so a
    # slow abort is retried rather than timed.
    assert "abort" in (_finish_after_abort(tenants, f"job-a{i}", "a") for i in range(5))
    tenants.wait_idle_and_whole()


def test_a_tenant_over_its_share_gets_429_and_others_are_served(tenants) -> None:
    """Three prompts in one streamed request, one running at a time (--max-running-requests
    1): at its first event at least the last two are still waiting, so two more are over the
    share of 3 even if the first has finished by the time they arrive."""
    sp = {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0}
    rids = [f"share-{i}" for i in range(3)]
    body = {"text": ["Count:"] * 3, "sampling_params": sp, "rid": rids, "stream": True}
    refused = None
    with httpx.stream(
        "POST", tenants.url + "/generate", json=body, headers=_auth("a"), timeout=120
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if refused is None and line.startswith("data:"):
                more = {"text": ["more", "more"], "sampling_params": {"max_new_tokens": 1}}
                refused = httpx.post(tenants.url + "/generate", json=more, headers=_auth("a"))
                assert _gen(tenants, "b", "B's own prompt")["cached_tokens"] == 0
                for rid in rids:
                    httpx.post(
                        tenants.url + "/abort_request", json={"rid": rid}, headers=_auth("a")
                    )
    assert refused is not None and refused.status_code == 429, refused
    assert "--max-requests-per-tenant" in refused.text
    tenants.wait_idle_and_whole()


def test_a_tenant_over_its_token_share_gets_429(tenants) -> None:
    """Three prompts of 400 tokens hold ~1209 of the 1250, and at least two of them are still
    waiting when the stream's first event comes (one runs at a time); one more asking for 450
    is over, whether or not the first has finished by then."""
    sp = {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0}
    rids = ["t-0", "t-1", "t-2"]
    body = {"text": ["Count:"] * 3, "sampling_params": sp, "rid": rids, "stream": True}
    big = {"text": ["Count:"] * 3, "sampling_params": {**sp, "max_new_tokens": 500}}
    r = httpx.post(tenants.url + "/generate", json=big, headers=_auth("b"))
    assert r.status_code == 429 and "--max-tokens-per-tenant" in r.text  # alone over it
    refused = None
    with httpx.stream(
        "POST", tenants.url + "/generate", json=body, headers=_auth("a"), timeout=120
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if refused is None and line.startswith("data:"):
                more = {"text": "more", "sampling_params": {"max_new_tokens": 450}}
                refused = httpx.post(tenants.url + "/generate", json=more, headers=_auth("a"))
                _gen(tenants, "b", "B is served meanwhile")  # another tenant's share is its own
                for rid in rids:
                    httpx.post(
                        tenants.url + "/abort_request", json={"rid": rid}, headers=_auth("a")
                    )
    assert refused is not None and refused.status_code == 429, refused
    assert "--max-tokens-per-tenant" in refused.text and "asks for" in refused.text
    tenants.wait_idle_and_whole()


def test_the_key_file_is_reread_on_sighup(tenants) -> None:
    r = httpx.post(tenants.url + "/generate", json={"text": "x"}, headers=_auth("new-key"))
    assert r.status_code == 401
    _write_keys(tenants.key_file, {"c": "new-key"})
    os.kill(tenants.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = httpx.post(
            tenants.url + "/generate",
            json={"text": "x", "sampling_params": {"max_new_tokens": 1}},
            headers=_auth("new-key"),
        )
        if r.status_code == 200:
            break
        time.sleep(0.1)
    assert r.status_code == 200, r.text
    tenants.key_file.write_text("{broken")  # a broken file keeps the keys in use
    os.kill(tenants.proc.pid, signal.SIGHUP)
    time.sleep(0.5)
    assert httpx.get(tenants.url + "/get_model_info", headers=_auth("new-key")).status_code == 200
    _write_keys(tenants.key_file)
    tenants.wait_idle_and_whole()


def test_a_shared_prefix_cache_is_shared(tiny_llama_path, tmp_path) -> None:
    _write_keys(tmp_path / "keys.json")
    server = start_server(
        tiny_llama_path,
        tmp_path,
        "--api-key-file",
        str(tmp_path / "keys.json"),
        "--shared-prefix-cache",
    )
    server.headers = _auth("ops")
    try:
        _gen(server, "a")
        assert _gen(server, "b")["cached_tokens"] > 100
        server.wait_idle_and_whole()
    finally:
        server.stop()


def test_a_bad_key_file_stops_the_server_with_its_reason(tiny_llama_path, tmp_path) -> None:
    bad = tmp_path / "keys.json"
    bad.write_text(json.dumps({"keys": [{"key": "k", "tenant": "a b"}]}))
    run = subprocess.run(
        [sys.executable, "-m", "radixrt.launch_server", "--model-path", str(tiny_llama_path)]
        + ["--port", "0", "--api-key-file", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "keys[0]: tenant must be" in run.stdout + run.stderr


def test_the_languages_endpoint_sends_its_cache_salt(tenants) -> None:
    import radixrt as rt

    text = " ".join(f"program line {i} reads its input." for i in range(50))  # new to A
    ep = rt.RuntimeEndpoint(tenants.url, api_key=KEYS["a"], cache_salt="lang")
    ep.generate([text], {"max_new_tokens": 1, "temperature": 0})
    again = ep.generate([text], {"max_new_tokens": 1, "temperature": 0})[0]
    assert again["meta_info"]["cached_tokens"] > 100
    assert _gen(tenants, "a", text)["cached_tokens"] == 0  # no salt: another namespace
    tenants.wait_idle_and_whole()


def test_the_explainer_shows_a_tenant_its_own_cache_and_nothing_of_others(tenants) -> None:
    def explain(who: str, **body: Any) -> dict[str, Any]:
        r = httpx.post(tenants.url + "/v1/cache/explain", json=body, headers=_auth(who))
        assert r.status_code == 200, r.text
        return r.json()

    notes = "Tenant A's private notes: " + " ".join(f"note {i} is kept." for i in range(60))
    _gen(tenants, "a", notes)  # cached in A's namespace only
    edited = notes.replace("note 30 is kept", "note 30 is dropped")
    why = explain("a", text=edited)
    assert why["cause"] == "diverged" and why["cached_tokens"] == why["divergence"] > 100
    assert "dropped" in why["prompt_side"]["after"] and "kept" in why["cached_side"]["after"]
    assert explain("a", text=notes)["cause"] == "hit"
    other = explain("b", text=edited)  # B guesses at A's prompt: nothing is cached for B
    assert other["cause"] in ("never_seen", "new_suffix") and "cached_side" not in other
    assert other["cached_tokens"] < 5
    assert explain("a", text=notes, cache_salt="elsewhere")["cause"] == "other_namespace"
    chat = explain("a", messages=[{"role": "user", "content": "Hi"}])
    assert chat["prompt_tokens"] > 3
    r = httpx.post(tenants.url + "/v1/cache/explain", json={}, headers=_auth("a"))
    assert r.status_code == 400 and "exactly one" in r.text
    tenants.wait_idle_and_whole()


def test_a_request_can_ask_why_it_missed(tenants) -> None:
    text = "Opt-in explanation: " + " ".join(f"step {i} is done." for i in range(40))
    sp = {"max_new_tokens": 1, "temperature": 0}
    body = {"text": text, "sampling_params": sp, "explain_cache": True}
    first = httpx.post(tenants.url + "/generate", json=body, headers=_auth("a")).json()
    assert first["meta_info"]["cache_explanation"]["cause"] == "never_seen"
    body["text"] = text.replace("step 20", "step twenty")
    second = httpx.post(tenants.url + "/generate", json=body, headers=_auth("a")).json()
    why = second["meta_info"]["cache_explanation"]
    assert why["cause"] == "diverged" and why["cached_tokens"] == why["divergence"]
    assert why["cached_tokens"] == second["meta_info"]["cached_tokens"]
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 1,
        "explain_cache": True,
    }
    r = httpx.post(tenants.url + "/v1/chat/completions", json=chat, headers=_auth("a"))
    details = r.json()["usage"]["prompt_tokens_details"]
    assert details["cache_explanation"]["cause"] in ("never_seen", "diverged", "new_suffix")
    plain = httpx.post(tenants.url + "/generate", json={**body, "explain_cache": False})
    assert plain.status_code == 401  # (no key) the opt-in changes nothing about auth
    tenants.wait_idle_and_whole()


def test_each_tenant_sees_its_own_usage_only(tenants) -> None:
    def usage(who: str) -> dict[str, Any]:
        r = httpx.get(tenants.url + "/v1/usage", headers=_auth(who), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    before_a, before_b = usage("a"), usage("b")
    _gen(tenants, "a", "A counts this one. " * 10)
    _gen(tenants, "a", "A counts this one. " * 10)  # the second reads its own first
    a, b = usage("a"), usage("b")
    assert a["tenant"] == "a" and b["tenant"] == "b"
    grew = {k: a["since_start"][k] - before_a["since_start"][k] for k in before_a["since_start"]}
    assert grew["requests"] == 2 and grew["completion_tokens"] == 2
    assert grew["prompt_tokens"] > 20 and grew["cached_tokens"] > 10
    assert b["since_start"] == before_b["since_start"]  # nothing of A's shows in B's
    assert a["in_flight"] == {"requests": 0, "tokens": 0}
    assert a["limits"] == {"max_requests_per_tenant": 3, "max_tokens_per_tenant": 1250}
    tenants.wait_idle_and_whole()
