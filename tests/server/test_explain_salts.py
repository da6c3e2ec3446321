"""The cache explainer across salts on a server without tenants (docs/reliability.md): a
caller sees its own salt's namespace only, no other salt's token counts, and no cached text
of a namespace that is everyone's; each explanation is metered like a request."""

from __future__ import annotations

from typing import Any

SECRET = "Client one's private notes: " + " ".join(f"note {i} is kept." for i in range(30))
GUESS = SECRET.replace("note 20 is kept", "note 20 is gone")


def _gen(server: Any, text: str, **extra: Any) -> dict[str, Any]:
    body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}, **extra}
    r = server.post("/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def _explain(server: Any, text: str, **extra: Any) -> dict[str, Any]:
    r = server.post("/v1/cache/explain", json={"text": text, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_another_salt_reveals_neither_counts_nor_text(tiny_server) -> None:
    _gen(tiny_server, SECRET, cache_salt="first-client")
    mine = _explain(tiny_server, GUESS, cache_salt="first-client")  # the owner sees its own
    assert mine["cause"] == "diverged" and mine["cached_tokens"] > 50
    assert "kept" in mine["cached_side"]["after"]
    for why in (
        _explain(tiny_server, GUESS, cache_salt="second-client"),
        _explain(tiny_server, SECRET, cache_salt="second-client"),
        _explain(tiny_server, SECRET),  # no salt at all
        _gen(tiny_server, GUESS, cache_salt="second-client", explain_cache=True)[
            "cache_explanation"
        ],
    ):
        assert why["cause"] == "never_seen", why
        assert why["cached_tokens"] == 0 and "other_namespace_tokens" not in why
        assert "cached_side" not in why
    tiny_server.wait_idle_and_whole()


def test_the_unsalted_namespace_shows_no_cached_text(tiny_server) -> None:
    secret = SECRET.replace("Client one", "Client three")
    _gen(tiny_server, secret)  # no salt: the namespace everyone without a salt shares
    why = _explain(tiny_server, secret.replace("note 20 is kept", "note 20 is gone"))
    assert why["cause"] == "diverged" and why["cached_tokens"] > 50  # as cached_tokens says
    assert "cached_side" not in why and "gone" in why["prompt_side"]["after"]
    tiny_server.wait_idle_and_whole()


def test_an_explanation_is_metered(tiny_server) -> None:
    def explains() -> tuple[int, int]:
        r = tiny_server.get("/v1/usage")
        assert r.status_code == 200, r.text
        totals = r.json()["since_start"]
        return totals["explains"], totals["explained_tokens"]

    calls, tokens = explains()
    why = _explain(tiny_server, "how many tokens does this explanation cost?")
    assert explains() == (calls + 1, tokens + why["prompt_tokens"])
