"""Gemini's cachedContents and generateContent with the official google-genai SDK against a real
SmolLM2 server with two tenants (x-goog-api-key). Without a server: test_gemini_protocol.py."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from radixrt.serve.http.protocol import Limits
from radixrt.serve.web.keys import hash_key

from .server_proc import start_server

KEYS = {"a": "key-of-a", "b": "key-of-b", "ops": "key-of-ops"}
SYSTEM = "You answer in one short sentence about geography."
FACTS = "Facts: " + " ".join(f"City {i} lies on river {i}." for i in range(12))
LIMITS = Limits(context_length=2048, max_total_tokens=4096, vocab_size=49152)


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("gemini")
    entries = [
        {"key": hash_key(KEYS["a"]), "tenant": "a"},
        {"key": hash_key(KEYS["b"]), "tenant": "b"},
        {"key": hash_key(KEYS["ops"]), "tenant": "ops", "role": "admin"},
    ]
    (tmp / "keys.json").write_text(json.dumps({"keys": entries}))
    server = start_server(smollm2_path, tmp, "--api-key-file", str(tmp / "keys.json"))
    server.headers = {"x-goog-api-key": KEYS["ops"]}
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _client(server: Any, who: str = "a") -> genai.Client:
    options = types.HttpOptions(base_url=server.url, api_version="v1beta")
    return genai.Client(api_key=KEYS[who], http_options=options)


@pytest.fixture(scope="module")
def model(server: Any) -> str:
    return server.get("/v1/models").json()["data"][0]["id"]


def _create(client: genai.Client, model: str, ttl: str = "300s", **kw: Any) -> Any:
    config = types.CreateCachedContentConfig(
        contents=[FACTS], system_instruction=SYSTEM, ttl=ttl, **kw
    )
    return client.caches.create(model=model, config=config)


def _raw(server: Any, method: str, path: str, who: str = "a", **kw: Any) -> httpx.Response:
    headers = {"x-goog-api-key": KEYS[who]}
    return httpx.request(method, server.url + path, headers=headers, timeout=60, **kw)


def test_cache_create_get_update_delete(server, model) -> None:
    client = _client(server)
    city = {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}
    lookup = types.FunctionDeclaration(name="lookup", description="Finds a city.", parameters=city)
    cache = _create(
        client, model, display_name="facts", tools=[types.Tool(function_declarations=[lookup])]
    )
    assert cache.name.startswith("cachedContents/") and cache.model == "models/" + model
    assert cache.display_name == "facts" and cache.usage_metadata.total_token_count > 50
    assert (cache.expire_time - cache.create_time).total_seconds() == pytest.approx(300, abs=1)
    got = client.caches.get(name=cache.name)
    assert got.name == cache.name and got.expire_time == cache.expire_time
    raw = _raw(server, "GET", "/v1beta/" + cache.name).json()
    assert raw["expireTime"].endswith("Z") and raw["tokenHours"] >= 0
    config = types.UpdateCachedContentConfig(ttl="600.5s")
    moved = client.caches.update(name=cache.name, config=config)
    left = (moved.expire_time - moved.update_time).total_seconds()
    assert left == pytest.approx(600.5, abs=0.2) and moved.update_time > cache.update_time
    until = datetime.now(timezone.utc) + timedelta(seconds=700)
    config = types.UpdateCachedContentConfig(expire_time=until)
    moved = client.caches.update(name=cache.name, config=config)
    assert abs((moved.expire_time - until).total_seconds()) < 0.01
    r = _raw(server, "PATCH", "/v1beta/" + cache.name, json={"displayName": "x", "ttl": "9s"})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "displayName" in r.json()["error"]["message"]
    assert _raw(server, "GET", "/v1beta/" + cache.name).json()["tokenHours"] > raw["tokenHours"]
    client.caches.delete(name=cache.name)
    with pytest.raises(errors.ClientError) as e:
        client.caches.get(name=cache.name)
    assert e.value.code == 404 and e.value.status == "NOT_FOUND"


def test_cache_list_pages_and_tenants_are_isolated(server, model) -> None:
    client, other = _client(server), _client(server, "b")
    names = [_create(client, model, ttl=f"{300 + i}s").name for i in range(3)]
    try:
        listed = [c.name for c in client.caches.list(config={"page_size": 2})]
        assert listed == names
        first = _raw(server, "GET", "/v1beta/cachedContents?pageSize=2").json()
        assert len(first["cachedContents"]) == 2 and first["nextPageToken"]
        token = first["nextPageToken"]
        second = _raw(server, "GET", f"/v1beta/cachedContents?pageSize=2&pageToken={token}").json()
        assert [c["name"] for c in second["cachedContents"]] == names[2:]
        assert "nextPageToken" not in second
        assert list(other.caches.list()) == []
        with pytest.raises(errors.ClientError, match="NOT_FOUND"):
            other.caches.get(name=names[0])
        with pytest.raises(errors.ClientError, match="NOT_FOUND"):
            other.caches.delete(name=names[0])
        with pytest.raises(errors.ClientError, match="NOT_FOUND"):
            other.models.generate_content(
                model=model,
                contents="Hi",
                config=types.GenerateContentConfig(cached_content=names[0]),
            )
    finally:
        for name in names:
            client.caches.delete(name=name)


def test_generate_on_a_cache_serves_its_tokens_and_streams_the_same_text(server, model) -> None:
    client = _client(server)
    cache = _create(client, model)
    try:
        config = types.GenerateContentConfig(
            cached_content=cache.name, max_output_tokens=8, temperature=0
        )
        question = "Which river does City 3 lie on?"
        out = client.models.generate_content(model=model, contents=question, config=config)
        usage, cached_len = out.usage_metadata, cache.usage_metadata.total_token_count
        assert usage.cached_content_token_count >= cached_len - 2
        assert usage.prompt_token_count > usage.cached_content_token_count
        assert usage.candidates_token_count == 8 and out.text
        assert usage.total_token_count == usage.prompt_token_count + 8
        assert out.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
        assert out.model_version == model
        chunks = list(
            client.models.generate_content_stream(model=model, contents=question, config=config)
        )
        assert "".join(c.text or "" for c in chunks) == out.text
        assert chunks[-1].usage_metadata.cached_content_token_count >= cached_len - 2
        with pytest.raises(errors.ClientError) as e:
            client.models.generate_content(
                model=model,
                contents=question,
                config=types.GenerateContentConfig(
                    cached_content=cache.name, system_instruction="Be rude."
                ),
            )
        assert e.value.code == 400 and "systemInstruction" in e.value.message
        with pytest.raises(errors.ClientError, match="model"):
            client.models.generate_content(model="other", contents=question, config=config)
    finally:
        client.caches.delete(name=cache.name)


def test_generate_without_a_cache_and_the_json_array_stream(server, model) -> None:
    client = _client(server)
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM, max_output_tokens=4, temperature=0, stop_sequences=["\n\n"]
    )
    out = client.models.generate_content(model=model, contents="Where is Paris?", config=config)
    assert out.text and out.usage_metadata.prompt_token_count > 10
    assert client.models.get(model=model).input_token_limit > 0
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Where is Paris?"}]}],
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "generationConfig": {"maxOutputTokens": 4, "temperature": 0, "stopSequences": ["\n\n"]},
    }
    r = _raw(server, "POST", f"/v1beta/models/{model}:streamGenerateContent", json=body)
    chunks = r.json()
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == out.text
    for bad, why in (
        ({"contents": []}, "contents"),
        ({"contents": [], "x": 1}, "x"),
        ({**body, "generationConfig": {"candidateCount": 65}}, "candidateCount"),
    ):
        r = _raw(server, "POST", f"/v1beta/models/{model}:generateContent", json=bad)
        assert r.status_code == 400 and why in r.json()["error"]["message"], r.text
    r = _raw(server, "POST", f"/v1beta/models/{model}:embedContent", json=body)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = _raw(server, "POST", "/v1beta/cachedContents", json={"model": model, "ttl": "5m"})
    assert r.status_code == 400 and "ttl" in r.json()["error"]["message"]
    assert _raw(server, "POST", "/v1beta/cachedContents").status_code == 400  # no body
    assert _raw(server, "POST", "/v1beta/models/{model}").status_code == 404
    wrong = httpx.get(server.url + "/v1beta/cachedContents", headers={"x-goog-api-key": "nope"})
    assert wrong.status_code == 401


def test_count_tokens_counts_what_generate_content_prompts(server, model) -> None:
    client = _client(server)
    question = "Where is Paris?"
    counted = client.models.count_tokens(model=model, contents=question)
    config = types.GenerateContentConfig(max_output_tokens=1, temperature=0)
    out = client.models.generate_content(model=model, contents=question, config=config)
    assert counted.total_tokens == out.usage_metadata.prompt_token_count > 3
    cache = _create(client, model)
    try:
        request = {"contents": [{"role": "user", "parts": [{"text": question}]}],
                   "cachedContent": cache.name}  # fmt: skip
        path = f"/v1beta/models/{model}:countTokens"
        r = _raw(server, "POST", path, json={"generateContentRequest": request})
        on_cache = r.json()
        assert r.status_code == 200, r.text
        assert on_cache["cachedContentTokenCount"] == cache.usage_metadata.total_token_count
        assert on_cache["totalTokens"] > on_cache["cachedContentTokenCount"]
        both = {"contents": request["contents"], "generateContentRequest": request}
        for bad, why in (({"contents": []}, "contents"), (both, "not both"), ({"x": 1}, "x")):
            r = _raw(server, "POST", path, json=bad)
            assert r.status_code == 400 and why in r.json()["error"]["message"], r.text
        other = _raw(server, "POST", path, who="b", json={"generateContentRequest": request})
        assert other.status_code in (403, 404), other.text  # another tenant's cache
    finally:
        client.caches.delete(name=cache.name)


def test_an_expired_cache_is_gone_and_unpinned(server, model) -> None:
    client = _client(server)
    cache = _create(client, model, ttl="2.5s")
    assert server.get("/get_server_info").json()["pinned_tokens"] > 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if _raw(server, "GET", "/v1beta/" + cache.name).status_code == 404:
            break
        time.sleep(0.2)
    with pytest.raises(errors.ClientError, match="NOT_FOUND"):
        client.caches.get(name=cache.name)
    assert list(client.caches.list()) == []
    while server.get("/get_server_info").json()["pinned_tokens"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.get("/get_server_info").json()["pinned_tokens"] == 0


def test_the_sdk_default_api_version_v1_is_served(server, model) -> None:
    """google-genai's default api_version is v1: every route is served there too, and
    `GET /v1/models` answers in Gemini's shape only to a Gemini client."""
    options = types.HttpOptions(base_url=server.url)  # no api_version: the SDK's default
    client = genai.Client(api_key=KEYS["a"], http_options=options)
    assert client._api_client._http_options.api_version == "v1"
    config = types.GenerateContentConfig(max_output_tokens=4, temperature=0)
    out = client.models.generate_content(model=model, contents="Where is Paris?", config=config)
    assert out.text and out.usage_metadata.candidates_token_count == 4
    streamed = client.models.generate_content_stream(
        model=model, contents="Where is Paris?", config=config
    )
    assert "".join(c.text or "" for c in streamed) == out.text
    assert client.models.count_tokens(model=model, contents="Where is Paris?").total_tokens > 3
    assert client.models.get(model=model).input_token_limit > 0
    assert [m.name for m in client.models.list()] == ["models/" + model]
    cache = _create(client, model)
    try:
        assert client.caches.get(name=cache.name).name == cache.name
        assert [c.name for c in client.caches.list()] == [cache.name]
        legacy = _client(server)  # the same cache under /v1beta
        assert legacy.caches.get(name=cache.name).expire_time == cache.expire_time
        config = types.GenerateContentConfig(cached_content=cache.name, max_output_tokens=4)
        out = client.models.generate_content(model=model, contents="City 3?", config=config)
        assert out.usage_metadata.cached_content_token_count > 50
    finally:
        client.caches.delete(name=cache.name)
    with pytest.raises(errors.ClientError) as e:
        client.caches.get(name=cache.name)
    assert e.value.code == 404 and e.value.status == "NOT_FOUND"
    r = _raw(server, "POST", f"/v1/models/{model}:embedContent", json={})
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    # Without google-genai's header, /v1/models stays OpenAI's list.
    assert _raw(server, "GET", "/v1/models").json()["data"][0]["id"] == model


def test_structured_output_through_the_sdk(server, model) -> None:
    """response_schema (a pydantic model, sent in OpenAPI's form), response_json_schema and
    text/x.enum: every answer parses within max_output_tokens, for several seeds, streamed
    or not; a thinkingConfig of no thinking and safety settings are taken."""
    import enum

    from pydantic import BaseModel, Field

    class City(BaseModel):
        city: str = Field(max_length=30)
        population: int | None

    class Mood(enum.Enum):
        HAPPY = "happy"
        SAD = "sad"

    client = _client(server)
    ask = "Name a city and its population."
    for seed in range(3):
        config = types.GenerateContentConfig(response_mime_type="application/json",
                                             response_schema=City, max_output_tokens=40,
                                             seed=seed, temperature=1.0)  # fmt: skip
        out = client.models.generate_content(model=model, contents=ask, config=config)
        assert isinstance(out.parsed, City), out.text
        streamed = client.models.generate_content_stream(model=model, contents=ask, config=config)
        assert City.model_validate_json("".join(c.text or "" for c in streamed)) == out.parsed
    raw = types.GenerateContentConfig(response_mime_type="application/json",
                                      response_json_schema=City.model_json_schema(),
                                      max_output_tokens=40)  # fmt: skip
    City.model_validate_json(client.models.generate_content(model=model, contents=ask,
                                                            config=raw).text)  # fmt: skip
    mood = types.GenerateContentConfig(response_mime_type="text/x.enum", response_schema=Mood,
                                       max_output_tokens=5)  # fmt: skip
    out = client.models.generate_content(model=model, contents="How are you?", config=mood)
    assert out.text in ("happy", "sad") and out.parsed in (Mood.HAPPY, Mood.SAD)
    quiet = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(thinking_budget=0), max_output_tokens=3,
        safety_settings=[types.SafetySetting(category="HARM_CATEGORY_HATE_SPEECH",
                                             threshold="BLOCK_NONE")],
    )  # fmt: skip
    assert client.models.generate_content(model=model, contents=ask, config=quiet).text
    thinking = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=64))
    with pytest.raises(errors.ClientError, match="no thinking mode is served"):
        client.models.generate_content(model=model, contents=ask, config=thinking)


def test_candidate_count_answers_that_many_candidates(server, model) -> None:
    """candidateCount k: the k samples are candidates 0..k-1 (seeded: each its own, the same
    again), streamed too, each with its own calls; usage counts the prompt once."""
    client = _client(server)
    config = types.GenerateContentConfig(candidate_count=3, max_output_tokens=6, temperature=1.0,
                                         seed=5)  # fmt: skip
    out = client.models.generate_content(model=model, contents="Say hi.", config=config)
    assert [c.index for c in out.candidates] == [0, 1, 2]
    texts = [c.content.parts[0].text for c in out.candidates]
    assert len(set(texts)) > 1
    again = client.models.generate_content(model=model, contents="Say hi.", config=config)
    assert [c.content.parts[0].text for c in again.candidates] == texts
    usage = out.usage_metadata
    assert usage.candidates_token_count == 18
    counted = client.models.count_tokens(model=model, contents="Say hi.").total_tokens
    assert usage.prompt_token_count == counted
    streamed: dict[int, str] = {}
    for chunk in client.models.generate_content_stream(model=model, contents="Say hi.",
                                                       config=config):  # fmt: skip
        for c in chunk.candidates:
            streamed[c.index] = streamed.get(c.index, "") + "".join(
                p.text or "" for p in c.content.parts
            )
    assert [streamed[i] for i in range(3)] == texts
    city = types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")},
                        required=["city"])  # fmt: skip
    fn = types.FunctionDeclaration(name="get_weather", parameters=city)
    calls = types.GenerateContentConfig(
        candidate_count=2, max_output_tokens=40, temperature=1.0,
        tools=[types.Tool(function_declarations=[fn])],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")),
    )  # fmt: skip
    out = client.models.generate_content(model=model, contents="Weather in Paris?", config=calls)
    assert [[p.function_call.name for p in c.content.parts] for c in out.candidates] == [
        ["get_weather"], ["get_weather"]]  # fmt: skip
