"""OpenAI chat fields an SDK client sends besides the sampling ones (tiny-model server):
metadata, store false, safety_identifier, service_tier, modalities and verbosity are taken;
OpenAI's developer role is the system turn; what cannot be honoured is a 400 naming it."""

from __future__ import annotations

from typing import Any

import pytest

ASKED = [{"role": "user", "content": "Say hi."}]


def _post(server: Any, **body: Any) -> Any:
    return server.post("/v1/chat/completions", json={"max_tokens": 4, "temperature": 0, **body})


def test_bookkeeping_fields_are_taken_and_change_nothing(tiny_server) -> None:
    plain = _post(tiny_server, messages=ASKED)
    assert plain.status_code == 200, plain.text
    r = _post(tiny_server, messages=ASKED, metadata={"team": "search", "run": "7"}, store=False,
              safety_identifier="user-hash", service_tier="auto", modalities=["text"],
              verbosity="medium")  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["choices"] == plain.json()["choices"]
    assert r.json()["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"]


def test_developer_is_the_system_turn(tiny_server) -> None:
    def prompt_of(role: str) -> list[int]:
        msgs = [{"role": role, "content": "Answer in one word."}, *ASKED]
        r = tiny_server.post("/tokenize", json={"messages": msgs})
        assert r.status_code == 200, r.text
        return r.json()["tokens"]

    assert prompt_of("developer") == prompt_of("system")
    msgs = [{"role": "developer", "content": "Answer in one word."}, *ASKED]
    dev, sys_ = _post(tiny_server, messages=msgs), _post(tiny_server, messages=[
        {"role": "system", "content": "Answer in one word."}, *ASKED])  # fmt: skip
    assert dev.status_code == sys_.status_code == 200
    assert dev.json()["choices"] == sys_.json()["choices"]
    assert dev.json()["usage"]["prompt_tokens"] == len(prompt_of("system"))


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": [{"role": "wizard", "content": "x"}]},
         "messages[0].role: 'wizard' is not one of system, developer, user, assistant, tool"),
        ({"messages": [*ASKED, {"role": "function", "content": "x"}]}, "messages[1].role"),
        ({"store": True}, "store: chat completions are not stored"),
        ({"reasoning_effort": "low"},
         "reasoning_effort: a thinking budget needs a server that reads reasoning"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort: 'extreme' is not one of none"),
        ({"functions": [{"name": "f", "parameters": {}}]}, "functions: not supported (use tools)"),
        ({"function_call": "auto"}, "function_call: not supported (use tool_choice)"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio: not supported"),
        ({"web_search_options": {}}, "web_search_options: not supported"),
        ({"modalities": ["text", "audio"]}, "modalities: only ['text'] is served"),
        ({"verbosity": "low"}, "verbosity: 'low' is not supported"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata: at most 16 keys"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k: keys have at most 64 characters"),
        ({"safety_identifier": "s" * 257}, "safety_identifier has 257 characters"),
        ({"user": "u" * 257}, "user has 257 characters"),
    ],
)  # fmt: skip
def test_what_cannot_be_honoured_is_a_400(tiny_server, body, fragment) -> None:
    r = _post(tiny_server, **{"messages": ASKED, **body})
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]


@pytest.mark.parametrize("name", ["user", "prompt_cache_key", "cache_salt"])
def test_client_keys_are_length_checked_on_completions_too(tiny_server, name) -> None:
    r = tiny_server.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1, name: "k" * 257})
    assert r.status_code == 400, r.text
    assert f"{name} has 257 characters; at most 256" in r.json()["error"]["message"]


def test_the_model_is_retrieved_by_each_sdk(tiny_server) -> None:
    """GET /v1/models/{model}: OpenAI's and Anthropic's SDKs each read their own fields from
    the same card (google-genai's header gets Gemini's shape: test_gemini_api.py)."""
    import anthropic
    import openai

    oa = openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="x", max_retries=0)
    name = oa.models.list().data[0].id
    got = oa.models.retrieve(name)
    assert (got.id, got.object, got.owned_by) == (name, "model", "radixrt")
    an = anthropic.Anthropic(base_url=tiny_server.url, api_key="x", max_retries=0)
    card = an.models.retrieve(name)
    assert (card.id, card.type, card.display_name) == (name, "model", name)
    assert card.created_at.timestamp() == got.created
    assert [m.id for m in an.models.list()] == [name]
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        oa.models.retrieve("other-model")
