"""The Responses dialect without a server: the checks of a body, a continued turn's prompt
reusing the earlier turn's ids token for token (SmolLM2's template), the store's per-tenant
bounds and pins."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from radixrt.serve.http.api.responses.input_items import input_messages
from radixrt.serve.http.api.responses.prompt import Conversation, build_prompt, plan_pins
from radixrt.serve.http.api.responses.protocol import ResponsesRequest, check_request
from radixrt.serve.http.api.responses.store import (
    ResponseNotFoundError,
    ResponseStore,
    StoredResponse,
)
from radixrt.serve.http.api.responses.tools import tool_plan
from radixrt.serve.http.protocol import BadRequestError, Limits, decode_body
from radixrt.serve.http.tools.formats import HERMES


def parse(**body: object) -> ResponsesRequest:
    return check_request(decode_body(msgspec.json.encode(body), ResponsesRequest))


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path):
    from radixrt.model.families.loader import load_tokenizer

    return load_tokenizer(smollm2_path)


IMAGE = {"type": "input_image", "image_url": "u"}
LIMITS = Limits(context_length=2048, max_total_tokens=4096, vocab_size=49152)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"background": True}, "background"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"reasoning": {"summary": "detailed"}}, "reasoning.summary"),
        ({"reasoning": {"effort": "low", "budget": 5}}, "budget"),
        ({"include": ["reasoning.encrypted_content"]}, "include"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools[0].type"),
        ({"truncation": "auto"}, "truncation"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt_cache_options": {"ttl": "1h"}}, "prompt_cache_options.ttl"),
        ({"prompt_cache_options": {"mode": "explicit"}}, "prompt_cache_options.mode"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
        ({"input": [{"type": "function_call_output", "output": "4"}]}, "input[0].call_id"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": [IMAGE]}]},
            "input[0].output[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": []}, "input"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_the_field(body: dict, named: str) -> None:
    full = {"input": "hi", **body}
    with pytest.raises(BadRequestError, match=named.replace("[", r"\[").replace("]", r"\]")):
        req = parse(**full)
        tool_plan(req, HERMES)
        sp_of(req)


def sp_of(req: ResponsesRequest) -> object:
    from radixrt.serve.http.api.responses.protocol import sampling_dict

    return sampling_dict(req)


def test_formats_and_prewarm_become_sampling_fields() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "name": "x", "schema": schema, "strict": True}
    assert sp_of(parse(input="hi", text={"format": fmt}))["json_schema"] == schema
    assert sp_of(parse(input="hi", text={"format": {"type": "json_object"}}))["json_schema"] == {
        "type": "object"
    }
    prewarm = parse(input="hi", max_output_tokens=50, prompt_cache_options={"prewarm": True})
    assert sp_of(prewarm)["max_new_tokens"] == 0


def test_a_history_resent_as_the_sdk_dumps_output_items_is_taken() -> None:
    """What the OpenAI Agents SDK sends by default: the history with the model's output items
    as the client parsed them, `include` and `tools` empty."""
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    said = ResponseOutputText(type="output_text", text="Blue.", annotations=[])
    item = ResponseOutputMessage(
        id="msg_1", type="message", role="assistant", status="completed", content=[said]
    )
    history = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        item.model_dump(),
        {"role": "user", "content": [{"type": "input_text", "text": "Another?"}]},
    ]
    req = parse(input=history, include=[], tools=[], store=False)
    assert input_messages(req.input) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?"},
    ]


def test_a_continued_turn_starts_with_the_earlier_prompt_and_output_ids(tokenizer) -> None:
    first = build_prompt(
        parse(input="Name a colour.", instructions="Be brief."), None, tokenizer, LIMITS, HERMES
    )
    # An output the tokenizer would not produce from its text (" bl" + "ue"), then EOS.
    output = [
        *tokenizer.encode(" bl", add_special_tokens=False),
        *tokenizer.encode("ue", add_special_tokens=False),
        tokenizer.eos_token_id,
    ]
    kept = first.conversation(output, " blue", [])
    second = build_prompt(
        parse(input="Another?", instructions="Be brief.", previous_response_id="resp_1"),
        kept,
        tokenizer,
        LIMITS,
        HERMES,
    )
    assert second.ids[: len(first.ids) + len(output)] == first.ids + output
    assert second.reused == len(first.ids) + len(output)
    assert tokenizer.decode(second.ids) == second.text
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    # Other instructions: the prefix differs, the prompt is tokenized afresh.
    other = build_prompt(
        parse(input="Another?", instructions="Be long.", previous_response_id="resp_1"),
        kept,
        tokenizer,
        LIMITS,
        HERMES,
    )
    assert other.reused == 0 and "Be long." in other.text and " blue" in other.text


def test_a_stored_turn_pins_its_prompt_with_its_ttl(tokenizer) -> None:
    req = parse(input="hi", prompt_cache_options={"ttl": "12h"}, prompt_cache_retention="24h")
    prompt = build_prompt(req, None, tokenizer, LIMITS, HERMES)
    (own, name), (retained, none) = plan_pins(req, prompt, "response-resp_1", 0.5, "a")
    assert (own.pin_id, own.offset, own.ttl_s, own.owner, name) == (
        "response-resp_1",
        len(prompt.ids),
        43200 * 0.5,
        "a",
        "12h",
    )
    assert none is None and retained.pin_id is None
    assert plan_pins(parse(input="hi"), prompt, None, 1.0, None) == []


class FakeTm:
    def __init__(self) -> None:
        self.dropped: list[str] = []

    async def update_pin(self, pin_id: str, expire_at: float | None) -> bool:
        assert expire_at is None
        self.dropped.append(pin_id)
        return True


def stored(i: int, owner: str = "a", text: str = "x") -> StoredResponse:
    conversation = Conversation([{"role": "user", "content": text}], text, [1, 2], [3])
    return StoredResponse(f"resp_{i}", owner, {"id": f"resp_{i}"}, conversation, f"pin-{i}")


def test_the_store_evicts_a_tenants_oldest_and_drops_its_pin() -> None:
    async def run() -> None:
        tm = FakeTm()
        store = ResponseStore(tm, max_per_owner=2, max_bytes_per_owner=10_000)
        for i in range(3):
            assert store.add(stored(i))
        assert store.add(stored(9, owner="b"))  # another tenant's count is its own
        await asyncio.sleep(0)
        assert tm.dropped == ["pin-0"]
        with pytest.raises(ResponseNotFoundError):
            store.get("a", "resp_0")
        with pytest.raises(ResponseNotFoundError):
            store.get("b", "resp_1")  # a's id is not b's
        assert store.get("a", "resp_2").id == "resp_2"
        await store.delete("a", "resp_2")
        assert tm.dropped == ["pin-0", "pin-2"] and store.num_stored("a") == 1
        # The byte bound: one response larger than the bound is not kept at all.
        assert not store.add(stored(5, text="y" * 20_000))
        await asyncio.sleep(0)
        assert "pin-5" in tm.dropped and store.num_stored("a") == 0

    asyncio.run(run())
