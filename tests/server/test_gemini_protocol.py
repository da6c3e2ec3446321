"""Gemini's protocol pieces without a server: durations and times, tools and conversations
rendered into the system message, generationConfig as sampling parameters, prompts on a
cache, and the cache registry's token-hours."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from radixrt.grammar.schema_regex import schema_enforced
from radixrt.serve.http.api.gemini.output_format import ThinkingConfig
from radixrt.serve.http.api.gemini.protocol import (
    Content,
    FunctionDeclaration,
    GenerateContentRequest,
    GenerationConfig,
    Part,
    Tool,
    conversation,
    declarations,
    format_time,
    parse_duration,
    parse_time,
    prepare_content,
    sampling_dict,
)
from radixrt.serve.http.cache_handles import CacheHandle, CacheRegistry
from radixrt.serve.http.protocol import BadRequestError, Limits, render_chat
from radixrt.serve.http.tools.formats import HERMES

SYSTEM = "You answer in one short sentence about geography."
FACTS = "Facts: " + " ".join(f"City {i} lies on river {i}." for i in range(12))
LIMITS = Limits(context_length=2048, max_total_tokens=4096, vocab_size=49152)


def test_durations_and_times_parse_and_format() -> None:
    assert parse_duration("300s") == 300 and parse_duration("1.5s") == 1.5
    assert parse_duration("0.000000001s") == pytest.approx(1e-9)
    for bad in ("5m", "-1s", "s", "1.5", "1e3s", " 3s", "1.0000000001s"):
        with pytest.raises(BadRequestError, match="ttl"):
            parse_duration(bad)
    t = parse_time("2025-01-31T12:00:00Z")
    assert t == 1738324800.0
    assert parse_time("2025-01-31T13:30:00.25+01:30") == t + 0.25
    assert parse_time("2025-01-31T12:00:00") == t  # the SDK's naive datetime: UTC
    assert parse_time(format_time(t + 0.5)) == t + 0.5
    assert format_time(t) == "2025-01-31T12:00:00.000000Z"
    for bad in (
        "2025-01-31",
        "2025-02-30T00:00:00Z",
        "yesterday",
        "2025-01-31T12:00:00+1",
        "2025-01-31T12:00:00+24:00",
    ):
        with pytest.raises(BadRequestError, match="expireTime"):
            parse_time(bad)


def test_tools_render_deterministically_into_the_system_message() -> None:
    a = FunctionDeclaration("f", "does f", {"type": "OBJECT", "properties": {"x": {"type": "S"}}})
    b = FunctionDeclaration("f", "does f", {"properties": {"x": {"type": "S"}}, "type": "OBJECT"})
    tools_a, tools_b = declarations([Tool([a])]), declarations([Tool([b])])
    assert tools_a[0].parameters == {"type": "object", "properties": {"x": {"type": "s"}}}
    assert HERMES.tools_text(tools_a) == HERMES.tools_text(tools_b)
    assert declarations([Tool([])]) == []
    system = Content([Part("Be "), Part("brief.")], role="user")
    msgs = conversation(
        [Content([Part("hi")]), Content([Part("yo")], "model")], system, tools_a, HERMES
    )
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"].startswith("Be brief.\n\n") and '"name": "f"' in msgs[0]["content"]
    with pytest.raises(BadRequestError, match="role"):
        conversation([Content([Part("x")], "system")], None, [], HERMES)


def test_generation_config_maps_to_sampling_params() -> None:
    config = GenerationConfig(
        temperature=0.0,
        top_p=0.5,
        top_k=3.0,
        max_output_tokens=8,
        stop_sequences=["x"],
        candidate_count=1,
        seed=3,
    )
    assert sampling_dict(config) == {
        "temperature": 0.0,
        "top_p": 0.5,
        "top_k": 3,
        "max_new_tokens": 8,
        "stop": ["x"],
        "seed": 3,
    }
    for bad in (
        GenerationConfig(candidate_count=0),
        GenerationConfig(candidate_count=65),
        GenerationConfig(top_k=2.5),
        GenerationConfig(response_mime_type="text/csv"),
        GenerationConfig(response_schema={"type": "STRING"}),  # no JSON or enum mime type
        GenerationConfig(response_mime_type="text/x.enum", response_schema={"type": "STRING"}),
        GenerationConfig(
            response_mime_type="application/json",
            response_schema={"type": "OBJECT"},
            response_json_schema={"type": "object"},
        ),  # fmt: skip
        GenerationConfig(response_modalities=["AUDIO"]),
        GenerationConfig(thinking_config=ThinkingConfig(thinking_budget=128)),
        GenerationConfig(thinking_config=ThinkingConfig(include_thoughts_snake=True)),
    ):
        with pytest.raises(BadRequestError):
            sampling_dict(bad)


def test_output_formats_as_constraints() -> None:
    """responseSchema in google-genai's wire form (upper-case types, snake-case keys as the
    SDK sends them, nullable, property_ordering) becomes JSON schema whose objects have their
    properties alone; responseJsonSchema is taken as is; text/x.enum is one of the values."""
    given = {"type": "OBJECT", "title": "P", "property_ordering": ["name", "tags", "age"],
             "required": ["name"], "properties": {
                 "name": {"type": "STRING", "max_length": 20},
                 "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "max_items": 3},
                 "age": {"type": "INTEGER", "nullable": True},
                 "any_of": {"any_of": [{"type": "STRING"}, {"type": "NUMBER"}]}}}  # fmt: skip
    d = sampling_dict(
        GenerationConfig(response_mime_type="application/json", response_schema=given)
    )
    assert d == {"json_schema": {"type": "object", "title": "P", "required": ["name"],
                                 "additionalProperties": False, "properties": {
        "name": {"type": "string", "maxLength": 20},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "age": {"type": ["integer", "null"]},
        "any_of": {"anyOf": [{"type": "string"}, {"type": "number"}]}}}}  # fmt: skip
    assert schema_enforced(d["json_schema"])  # the length-bounded path, not llguidance's
    raw = {"type": "object", "properties": {"a": {"type": "integer"}}}
    as_is = GenerationConfig(response_mime_type="application/json", response_json_schema=raw)
    assert sampling_dict(as_is) == {"json_schema": raw}
    assert sampling_dict(GenerationConfig(response_mime_type="application/json")) == {
        "json_schema": {}  # any JSON value
    }
    enum = {"type": "STRING", "enum": ["a.b", "c"]}
    assert sampling_dict(
        GenerationConfig(response_mime_type="text/x.enum", response_schema=enum)
    ) == {"regex": "a\\.b|c"}
    none = GenerationConfig(thinking_config=ThinkingConfig(thinking_budget_snake=0),
                            response_modalities=["TEXT"])  # fmt: skip
    assert sampling_dict(none) == {}
    assert sampling_dict(GenerationConfig(candidate_count=3)) == {"n": 3}


def test_a_prompt_on_a_cache_starts_with_its_exact_tokens(smollm2_path: Path) -> None:
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    cached = conversation([Content([Part(FACTS)])], Content([Part(SYSTEM)]), [], HERMES)
    text = render_chat(cached, tok, LIMITS, add_generation_prompt=False)
    ids = tok.encode(text, add_special_tokens=False)
    handle = CacheHandle(
        "h", "", None, ids, 0.0, 0.0, 1e12, meta={"messages": cached, "text": text}
    )
    body = GenerateContentRequest([Content([Part("Which river?")])])
    prep = prepare_content(body, handle, tok, LIMITS, HERMES)
    assert prep.starts_with_handle and prep.input_ids[: len(ids)] == ids
    assert tok.decode(prep.input_ids).endswith("Which river?<|im_end|>\n<|im_start|>assistant\n")
    assert prep.params.max_new_tokens == LIMITS.context_length - len(prep.input_ids)
    body.system_instruction = Content([Part("other")])
    with pytest.raises(BadRequestError, match="systemInstruction"):
        prepare_content(body, handle, tok, LIMITS, HERMES)


def test_registry_token_hours_count_live_expired_and_deleted_handles() -> None:
    class FakeTM:
        async def update_pin(self, pin_id: str, expire_at: float | None) -> bool:
            return True

    registry = CacheRegistry(FakeTM())
    now = time.time()
    live = CacheHandle("live", "a", None, [1] * 3600, now - 2, now - 2, now + 100)
    gone = CacheHandle("gone", "a", None, [1] * 1800, now - 10, now - 10, now - 4)  # 6 s held
    registry._handles = {("a", "live"): live, ("a", "gone"): gone}
    assert registry.token_hours() == pytest.approx(2 + 3, abs=0.05)
    assert [h.id for h in registry.list("a")] == ["live"]  # forgets the expired one
    assert registry.token_hours() == pytest.approx(2 + 3, abs=0.05)
    asyncio.run(registry.delete("a", "live"))
    held = registry.token_hours()
    assert held == pytest.approx(2 + 3, abs=0.05) and registry.list("a") == []
    time.sleep(0.01)
    assert registry.token_hours() == held  # nothing live: no longer grows
