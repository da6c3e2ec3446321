"""Cache-miss diagnostics through the official `anthropic` and `openai` clients on a real server
with the default model and two tenants: Anthropic `diagnostics.previous_message_id` and OpenAI
`prompt_cache_options.comparison_response_id` (chat completions and /v1/responses) on a changed
system prompt, tool list and earlier message, an unchanged continuation (a hit), an unknown id,
another tenant's id, and the per-tenant bound (6 here) forgetting the oldest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from radixrt.serve.web.keys import hash_key

from .server_proc import ServerProcess, start_server

TENANTS = ("a", "b", "c", "d", "e")  # one per test, so each sees only its own bound
KEYS = {t: f"key-of-{t}" for t in TENANTS}
MAX_FINGERPRINTS = 6
SYSTEM = "You are a terse assistant. " + " ".join(f"Rule {i}: answer briefly." for i in range(8))
TOOL = {"name": "add", "description": "Add two integers.",
        "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}  # fmt: skip
FIRST = [{"role": "user", "content": "Name a color."}]
NEXT = [*FIRST, {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another?"}]
EDITED = [{"role": "user", "content": "Name a shape."}, *NEXT[1:]]  # an earlier message changed


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("diagnostics")
    entries = [{"key": hash_key(KEYS[t]), "tenant": t} for t in KEYS]
    (tmp / "keys.json").write_text(json.dumps({"keys": entries}))
    s = start_server(smollm2_path, tmp, "--api-key-file", str(tmp / "keys.json"),
                     "--max-fingerprints", str(MAX_FINGERPRINTS))  # fmt: skip
    try:
        yield s
        assert s.proc.poll() is None, "the server died during the tests"
    finally:
        s.stop()


def claude(server: ServerProcess, tenant: str = "a") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEYS[tenant], max_retries=0)


def gpt(server: ServerProcess, tenant: str = "a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEYS[tenant], max_retries=0)


def message(client: anthropic.Anthropic, previous: str | None, **change: Any) -> Any:
    body: dict[str, Any] = {"model": "default", "max_tokens": 1, "system": SYSTEM,
                            "tools": [TOOL], "messages": NEXT}  # fmt: skip
    body.update(change)
    return client.messages.create(**body, diagnostics={"previous_message_id": previous})


def reason_of(msg: Any) -> Any:
    return None if msg.diagnostics is None else msg.diagnostics.cache_miss_reason


def test_anthropic_reasons(server: ServerProcess):
    client = claude(server)
    first = message(client, None, messages=FIRST)
    assert first.diagnostics is None  # opted in, nothing to compare with
    hit = message(client, first.id)
    assert hit.diagnostics is None  # an unchanged continuation: nothing diverged
    assert hit.usage.cache_read_input_tokens >= first.usage.input_tokens - 32
    prompt_len = first.usage.input_tokens + first.usage.cache_read_input_tokens
    missed = {}
    for change, kind in (
        ({"system": "You are verbose."}, "system_changed"),
        ({"tools": [{**TOOL, "name": "plus"}]}, "tools_changed"),
        ({"messages": EDITED}, "messages_changed"),
    ):  # fmt: skip
        reason = reason_of(message(client, first.id, **change))
        assert reason is not None and reason.type == kind, change
        assert 0 < reason.cache_missed_input_tokens <= prompt_len
        missed[kind] = reason.cache_missed_input_tokens
    # The earlier prompt's tokens after where this one leaves it: a change in the system turn
    # (tools first, then the system prompt) loses more than one in the messages after it.
    assert missed["tools_changed"] > missed["messages_changed"]
    assert missed["system_changed"] > missed["messages_changed"]
    unknown = reason_of(message(client, "msg_" + "0" * 32))
    assert unknown.type == "previous_message_not_found"
    assert not hasattr(unknown, "cache_missed_input_tokens")
    other = reason_of(message(claude(server, "b"), first.id))
    assert other.type == "previous_message_not_found"  # another tenant's id


def test_anthropic_stream_carries_the_diagnosis(server: ServerProcess):
    client = claude(server)
    first = message(client, None, messages=FIRST)
    ask = {"previous_message_id": first.id}
    body = {"model": "default", "max_tokens": 1, "system": "Changed.", "tools": [TOOL]}
    with client.messages.stream(**body, messages=NEXT, diagnostics=ask) as stream:
        final = stream.get_final_message()
    assert reason_of(final).type == "system_changed"


FUNCTION = {"type": "function",
            "function": {"name": TOOL["name"], "parameters": TOOL["input_schema"]}}  # fmt: skip


def chat(client: openai.OpenAI, compare_to: str | None, **change: Any) -> Any:
    body: dict[str, Any] = {"model": "default", "max_tokens": 1, "temperature": 0,
                            "messages": [{"role": "system", "content": SYSTEM}, *NEXT],
                            "tools": [FUNCTION]}  # fmt: skip
    body.update(change)
    if compare_to is not None:
        body["prompt_cache_options"] = {"comparison_response_id": compare_to}
    return client.chat.completions.create(**body)


def test_openai_chat_diagnostics(server: ServerProcess):
    client = gpt(server, "c")
    sys = {"role": "system", "content": SYSTEM}
    first = chat(client, None, messages=[sys, *FIRST])
    assert (first.model_extra or {}).get("prompt_cache_diagnostics") is None  # not asked
    hit = chat(client, first.id)
    assert hit.prompt_cache_diagnostics == {"type": "cache_hit"}
    prompt_len = first.usage.prompt_tokens
    tool = {"type": "function", "function": {"name": "plus", "parameters": {"type": "object"}}}
    for change, reason in (
        ({"messages": [{"role": "system", "content": "Be verbose."}, *NEXT]}, "input_changed"),
        ({"tools": [tool]}, "tools_changed"),
        ({"messages": [sys, *EDITED]}, "input_changed"),
    ):  # fmt: skip
        d = chat(client, first.id, **change).prompt_cache_diagnostics
        assert d["type"] == "cache_miss" and d["reason"] == reason, change
        assert d["cache_missed_tokens"] + d["comparison_reusable_tokens"] == prompt_len
        assert d["cache_missed_tokens"] > 0
    chunks = list(chat(client, first.id, stream=True))
    assert chunks[0].prompt_cache_diagnostics == {"type": "cache_hit"}
    missing = {"type": "comparison_response_not_found"}
    assert chat(client, "chatcmpl-nope").prompt_cache_diagnostics == missing
    assert chat(gpt(server, "b"), first.id).prompt_cache_diagnostics == missing


def test_openai_responses_diagnostics(server: ServerProcess):
    client = gpt(server, "d")
    base: dict[str, Any] = {"model": "default", "max_output_tokens": 1, "temperature": 0,
                            "instructions": SYSTEM, "store": False}  # fmt: skip
    first = client.responses.create(**base, input="Name a color.")
    assert first.prompt_cache_diagnostics is None
    again = {"comparison_response_id": first.id}
    hit = client.responses.create(**base, input=NEXT, prompt_cache_options=again)
    assert hit.prompt_cache_diagnostics.type == "cache_hit"
    assert hit.prompt_cache_options.comparison_response_id == first.id
    changed = client.responses.create(**{**base, "instructions": "Be verbose."}, input=NEXT,
                                      prompt_cache_options=again)  # fmt: skip
    d = changed.prompt_cache_diagnostics
    assert d.type == "cache_miss" and d.reason == "input_changed" and d.cache_missed_tokens > 0
    stored = client.responses.create(**{**base, "store": True}, input="Name a color.")
    to_stored = {"comparison_response_id": stored.id}
    chained = client.responses.create(**base, input="Another?", previous_response_id=stored.id,
                                      prompt_cache_options=to_stored)  # fmt: skip
    assert chained.prompt_cache_diagnostics.type == "cache_hit"
    gone = client.responses.create(**base, input="x", prompt_cache_options={
        "comparison_response_id": "resp_nope"})  # fmt: skip
    assert gone.prompt_cache_diagnostics.type == "comparison_response_not_found"


def test_the_bound_forgets_the_oldest(server: ServerProcess):
    client = gpt(server, "e")
    short = {"messages": FIRST, "tools": None}  # the same short prompt: served from cache
    ids = [chat(client, None, **short).id for _ in range(MAX_FINGERPRINTS + 1)]
    assert chat(client, ids[1], **short).prompt_cache_diagnostics == {"type": "cache_hit"}
    lost = chat(client, ids[0], **short)  # the oldest went when the seventh came
    assert lost.prompt_cache_diagnostics == {"type": "comparison_response_not_found"}
