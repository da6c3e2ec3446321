"""The prompt-stability guard over /v1/chat/completions on SmolLM2: a conversation that sends
back each reply as it came extends its prefix; one whose client edits an earlier reply or the
system prompt counts a break with its cause, and a stream is followed like a plain reply."""

from __future__ import annotations

import re
from typing import Any

SYSTEM = {"role": "system", "content": "You are a concise assistant for a pet shop."}


def _breaks(server: Any) -> dict[str, float]:
    text = server.get("/metrics").text
    found = re.findall(r'radixrt_prefix_breaks_total\{cause="([a-z_]+)"\} ([0-9.]+)', text)
    return {cause: float(n) for cause, n in found}


def _chat(server: Any, session: str, messages: list[dict[str, str]], **extra: Any) -> str:
    body = {"model": "m", "messages": messages, "max_tokens": 12, "temperature": 0, **extra}
    r = server.post("/v1/chat/completions", json=body, headers={"X-Session-Id": session})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_a_well_behaved_conversation_keeps_its_prefix(api_server) -> None:
    before = _breaks(api_server)
    turns = [SYSTEM, {"role": "user", "content": "Name one cat breed."}]
    for question in ("And one dog breed?", "And a bird?"):
        turns += [{"role": "assistant", "content": _chat(api_server, "good", turns)}]
        turns += [{"role": "user", "content": question}]
    _chat(api_server, "good", turns)
    assert _breaks(api_server) == before
    api_server.wait_idle_and_whole()


def test_an_edited_reply_and_a_changed_system_prompt_count_breaks(api_server) -> None:
    turns = [SYSTEM, {"role": "user", "content": "Name one cat breed."}]
    reply = _chat(api_server, "edits", turns)
    before = _breaks(api_server)
    edited = [*turns, {"role": "assistant", "content": "Actually, " + reply}]
    edited += [{"role": "user", "content": "Why?"}]
    _chat(api_server, "edits", edited)
    after = _breaks(api_server)
    assert after.get("assistant_turn_rewritten", 0) == before.get("assistant_turn_rewritten", 0) + 1
    changed = [{"role": "system", "content": "You are a verbose assistant for a pet shop."}]
    changed += edited[1:]
    _chat(api_server, "edits", changed)
    assert (
        _breaks(api_server).get("system_prompt_changed", 0)
        == after.get("system_prompt_changed", 0) + 1
    )
    api_server.wait_idle_and_whole()


def test_a_streamed_turn_is_followed_too(api_server) -> None:
    turns = [SYSTEM, {"role": "user", "content": "Name one fish."}]
    body = {"model": "m", "messages": turns, "max_tokens": 8, "temperature": 0, "stream": True}
    r = api_server.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "stream"})
    assert r.status_code == 200
    reply = "".join(re.findall(r'"content":"([^"]*)"', r.text))
    before = _breaks(api_server)
    later = [*turns, {"role": "assistant", "content": "Well, " + reply}, SYSTEM]
    _chat(api_server, "stream", later)
    assert sum(_breaks(api_server).values()) == sum(before.values()) + 1
    api_server.wait_idle_and_whole()
