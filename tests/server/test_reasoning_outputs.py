"""`--reasoning-parser`: a reasoning model's thinking apart from its answer, through the
openai and anthropic clients: chat completions' `reasoning_content`, the Responses API's
reasoning item, Anthropic's thinking blocks and Gemini's thought parts when asked for (whole
and streamed). A tiny random
Llama with SmolLM2's tokenizer plus `<think>` and `</think>` as added tokens (as Qwen3's and
DeepSeek-R1's are), read as DeepSeek-R1's (the output starts in its reasoning); a logit bias on
`</think>` makes the random model close it somewhere, so each sample's split is checked
against its own tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from tiny_models import make_tiny
from transformers import AddedToken

from radixrt.model.families.loader import load_tokenizer

from .server_proc import start_server

ASK = [{"role": "user", "content": "Why is the sky blue?"}]
SEEDS = range(6)


def _tiny_reasoner(tmp: pytest.TempPathFactory, smollm2_path: Path, special: bool):
    """A server of the tiny model with `<think>` and `</think>` added (as special tokens
    where `special`), read as DeepSeek-R1's; yields (server, the id of `</think>`), then
    checks the pool whole."""
    folder = make_tiny(tmp.mktemp("reasoning"), smollm2_path, "llama", vocab_size=49216)
    tok = load_tokenizer(smollm2_path)
    tok.add_tokens([AddedToken(t, special=special, normalized=False)
                    for t in ("<think>", "</think>")])  # fmt: skip
    tok.save_pretrained(folder)
    (end,) = tok.convert_tokens_to_ids(["</think>"])
    server = start_server(folder, tmp.mktemp("reasoning_server"),
                          "--reasoning-parser", "deepseek_r1")  # fmt: skip
    try:
        yield server, end
        server.wait_idle_and_whole()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server_and_end(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path):
    yield from _tiny_reasoner(tmp_path_factory, smollm2_path, special=False)


def _client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _split(raw: str) -> tuple[str, str]:
    """What DeepSeek-R1's parser makes of an output: reasoning up to </think>, the answer
    after it (its leading newlines dropped); all reasoning without it."""
    if "</think>" not in raw:
        return raw, ""
    thought, answer = raw.split("</think>", 1)
    return thought, answer.lstrip("\n")


def test_chat_completions_give_reasoning_content(server_and_end) -> None:
    server, end = server_and_end
    client, both = _client(server), 0
    args: dict[str, Any] = dict(model="m", messages=ASK, max_tokens=24, temperature=1,
                                logit_bias={str(end): 9})  # fmt: skip
    for seed in SEEDS:
        r = client.chat.completions.create(**args, seed=seed, logprobs=True)
        msg = r.choices[0].message
        raw = b"".join(bytes(t.bytes or []) for t in r.choices[0].logprobs.content).decode()
        thought, answer = _split(raw)
        extra = msg.model_extra or {}
        assert (extra["reasoning_content"] or "", msg.content or "") == (thought, answer), raw
        assert extra["reasoning"] == extra["reasoning_content"]
        both += bool(thought and answer)
        streamed = {"reasoning_content": "", "content": ""}
        for chunk in client.chat.completions.create(**args, seed=seed, stream=True):
            for c in chunk.choices:
                for key in streamed:
                    streamed[key] += (
                        (c.delta.model_extra or {}).get(key) or getattr(c.delta, key, None) or ""
                    )
        assert streamed == {"reasoning_content": thought, "content": answer}, seed
    assert both, "no sample both reasoned and answered: the test checks nothing"


def test_responses_give_a_reasoning_item(server_and_end) -> None:
    """Unbiased, the random model never closes its reasoning: a reasoning item holding the
    whole output (the chat route's reasoning_content for the same seed), then an empty
    message; streamed alike. Given back in the next turn's input, the item is taken."""
    server, _ = server_and_end
    client = _client(server)
    chat = client.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=1,
                                          seed=3)  # fmt: skip
    thought = (chat.choices[0].message.model_extra or {})["reasoning_content"]
    assert thought and chat.choices[0].message.content is None
    args: dict[str, Any] = dict(model="m", input=ASK[0]["content"], max_output_tokens=24,
                                temperature=1, extra_body={"seed": 3})  # fmt: skip
    r = client.responses.create(**args)
    assert [i.type for i in r.output] == ["reasoning", "message"], r.output
    assert r.output[0].content[0].text == thought and r.output_text == ""
    usage = r.usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens == usage.output_tokens
    deltas = {"response.reasoning_text.delta": "", "response.output_text.delta": ""}
    done = None
    for event in client.responses.create(**args, stream=True):
        if event.type in deltas:
            deltas[event.type] += event.delta
        if event.type == "response.reasoning_text.done":
            done = event.text
        if event.type in ("response.completed", "response.incomplete"):
            assert [i.type for i in event.response.output] == ["reasoning", "message"]
    assert deltas == {"response.reasoning_text.delta": thought, "response.output_text.delta": ""}
    assert done == thought
    turn = [ASK[0], *[i.model_dump(exclude_none=True) for i in r.output],
            {"role": "user", "content": "And at sunset?"}]  # fmt: skip
    again = client.responses.create(model="m", input=turn, max_output_tokens=4)
    assert again.status in ("completed", "incomplete")


def test_anthropic_thinking_blocks_when_asked_and_none_otherwise(server_and_end) -> None:
    """Thinking enabled: a thinking block holding the reasoning (greedy, the random model
    never closes it, so no text after it), streamed as thinking_delta pieces; given back in
    the next turn, the block is taken. Not asked for, the answer leaves the reasoning out (as
    Anthropic's API does)."""
    server, _ = server_and_end
    chat = _client(server).chat.completions.create(model="m", messages=ASK, max_tokens=12,
                                                   temperature=0)  # fmt: skip
    thought = (chat.choices[0].message.model_extra or {})["reasoning_content"]
    assert thought
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    greedy: dict[str, Any] = dict(model="m", max_tokens=12, messages=ASK,
                                  extra_body={"temperature": 0})  # fmt: skip
    thinks = {"type": "enabled", "budget_tokens": 1024}
    msg = client.messages.create(**greedy, thinking=thinks)
    assert [(b.type, getattr(b, "thinking", None)) for b in msg.content] == [("thinking", thought)]
    with client.messages.stream(**greedy, thinking=thinks) as s:
        pieces = [e.thinking for e in s if e.type == "thinking"]
        final = s.get_final_message()
    assert "".join(pieces) == thought and final.content[0].thinking == thought
    turn = [ASK[0], {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
            {"role": "user", "content": "And at sunset?"}]  # fmt: skip
    assert client.messages.create(model="m", max_tokens=4, messages=turn).stop_reason
    plain = client.messages.create(**greedy)
    assert "".join(b.text for b in plain.content if b.type == "text") == ""
    assert all(b.type != "thinking" for b in plain.content)
    with client.messages.stream(**greedy) as s:
        assert "".join(s.text_stream) == ""


def test_gemini_thoughts_when_asked_and_none_otherwise(server_and_end) -> None:
    server, _ = server_and_end
    chat = _client(server).chat.completions.create(model="m", messages=ASK, max_tokens=12,
                                                   temperature=0)  # fmt: skip
    thought = (chat.choices[0].message.model_extra or {})["reasoning_content"]
    contents = [{"role": "user", "parts": [{"text": ASK[0]["content"]}]}]
    config = {"maxOutputTokens": 12, "temperature": 0}
    body: dict[str, Any] = {"contents": contents, "generationConfig": config}
    r = server.post("/v1beta/models/m:generateContent", json=body)
    assert r.status_code == 200, r.text
    parts = r.json()["candidates"][0]["content"].get("parts") or []
    assert all(not p.get("thought") for p in parts) and "".join(p["text"] for p in parts) == ""
    body["generationConfig"]["thinkingConfig"] = {"includeThoughts": True, "thinkingBudget": 64}
    r = server.post("/v1beta/models/m:generateContent", json=body)
    assert r.json()["candidates"][0]["content"]["parts"] == [{"text": thought, "thought": True}]
    r = server.post("/v1beta/models/m:streamGenerateContent?alt=sse", json=body)
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    streamed = [p for c in chunks for p in c["candidates"][0]["content"].get("parts", [])]
    assert "".join(p["text"] for p in streamed if p.get("thought")) == thought
    assert "".join(p["text"] for p in streamed if not p.get("thought")) == ""
    # Thoughts given back in the history are taken (and not shown to the model).
    model = {"role": "model", "parts": [{"text": thought, "thought": True}]}
    user = {"role": "user", "parts": [{"text": "And at sunset?"}]}
    again = {"contents": [*contents, model, user], "generationConfig": {"maxOutputTokens": 4}}
    assert server.post("/v1beta/models/m:generateContent", json=again).status_code == 200


def _tokens(r: Any) -> list[str]:
    return [bytes(t.bytes or []).decode() for t in r.choices[0].logprobs.content]


def test_a_response_format_holds_the_answer_after_the_reasoning(server_and_end) -> None:
    """`</think>` is a token: the reasoning comes first, free, and the JSON schema holds the
    answer after it. Unbiased, the random model never closes its reasoning: the output's
    token budget forces `</think>` where only the shortest answer still fits, so every
    sample ends with a whole answer in the schema."""
    server, _ = server_and_end
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    client = _client(server)
    for seed in SEEDS:
        r = client.chat.completions.create(model="m", messages=ASK, max_tokens=24, seed=seed,
                                           temperature=1, response_format=fmt, logprobs=True)  # type: ignore[arg-type]  # fmt: skip
        choice = r.choices[0]
        tokens = _tokens(r)
        assert "</think>" in tokens, tokens
        cut = tokens.index("</think>")
        assert (choice.message.model_extra or {})["reasoning_content"] == "".join(tokens[:cut])
        assert json.loads(choice.message.content or "") in ({"ok": True}, {"ok": False})
        assert choice.finish_reason == "stop" and len(tokens) <= 24


def test_a_thinking_token_budget_closes_the_reasoning(server_and_end) -> None:
    """vLLM's thinking_token_budget: `</think>` forced after that many reasoning tokens, the
    answer free after it, usage counting the reasoning's tokens (the tags included);
    Anthropic's budget_tokens and Gemini's thinkingBudget likewise (0: no thinking at all)."""
    server, _ = server_and_end
    client = _client(server)
    greedy: dict[str, Any] = dict(model="m", messages=ASK, max_tokens=12, temperature=0)
    for budget in (0, 1, 5):
        extra = {"thinking_token_budget": budget}
        r = client.chat.completions.create(**greedy, logprobs=True, extra_body=extra)
        tokens = _tokens(r)
        assert tokens.index("</think>") == budget, tokens
        thought = (r.choices[0].message.model_extra or {}).get("reasoning_content") or ""
        assert thought == "".join(tokens[:budget])
        assert r.choices[0].message.content and r.choices[0].finish_reason == "length"
        details = r.usage.completion_tokens_details  # type: ignore[union-attr]
        assert details is not None and details.reasoning_tokens == budget + 1
    body = {"model": "m", "messages": ASK, "thinking_token_budget": -1}
    bad = server.post("/v1/chat/completions", json=body)
    assert bad.status_code == 400 and "thinking_token_budget" in bad.text
    anth = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    thinks = {"type": "enabled", "budget_tokens": 3}
    msg = anth.messages.create(model="m", max_tokens=12, messages=ASK,  # type: ignore[call-overload]
                               extra_body={"temperature": 0}, thinking=thinks)  # fmt: skip
    three = client.chat.completions.create(**greedy, extra_body={"thinking_token_budget": 3})
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == (three.choices[0].message.model_extra or {}).get(
        "reasoning_content"
    )
    assert msg.content[1].text == three.choices[0].message.content
    # Thinking disabled: none at all (a budget of 0), the answer as after an empty reasoning.
    off = anth.messages.create(model="m", max_tokens=12, messages=ASK,  # type: ignore[call-overload]
                               extra_body={"temperature": 0},
                               thinking={"type": "disabled"})  # fmt: skip
    zero = client.chat.completions.create(**greedy, extra_body={"thinking_token_budget": 0})
    assert [b.type for b in off.content] == ["text"]
    assert off.content[0].text == zero.choices[0].message.content
    contents = [{"role": "user", "parts": [{"text": ASK[0]["content"]}]}]
    thinking = {"includeThoughts": True, "thinkingBudget": 0}
    config = {"maxOutputTokens": 12, "temperature": 0, "thinkingConfig": thinking}
    g = server.post("/v1beta/models/m:generateContent",
                    json={"contents": contents, "generationConfig": config})  # fmt: skip
    parts = g.json()["candidates"][0]["content"]["parts"]
    assert all(not p.get("thought") for p in parts) and "".join(p["text"] for p in parts)
    assert g.json()["usageMetadata"]["thoughtsTokenCount"] == 1  # (the forced </think>)


def test_a_forced_call_follows_the_reasoning(server_and_end) -> None:
    """tool_choice naming a function: the reasoning first (a budget closes it), then the call
    its grammar forces; the call's arguments parse, and the reasoning is reported apart."""
    server, _ = server_and_end
    params = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    tool: Any = {"type": "function", "function": {"name": "add", "parameters": params}}
    r = _client(server).chat.completions.create(
        model="m",
        messages=ASK,
        max_tokens=48,
        temperature=0,
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "add"}},
        extra_body={"thinking_token_budget": 4},
    )
    msg = r.choices[0].message
    assert (msg.model_extra or {}).get("reasoning_content")
    calls = msg.tool_calls or []
    assert [c.function.name for c in calls] == ["add"]  # type: ignore[union-attr]
    assert isinstance(json.loads(calls[0].function.arguments)["a"], int)  # type: ignore[union-attr]


def test_effort_levels_cap_the_reasoning_in_every_dialect(server_and_end) -> None:
    """Effort levels are thinking budgets (tools/reasoning.py: EFFORT_BUDGETS). Greedy and
    unbiased, the random model never closes its reasoning, so a level's budget above the
    output's 12 tokens leaves the output as without one, and "none" is a budget of 0:
    OpenAI's reasoning_effort and the Responses API's reasoning.effort (echoed); Anthropic's
    adaptive thinking under output_config.effort (display omitted: the thinking left out),
    between_tools (no thinking before a first answer); Gemini's thinkingLevel."""
    server, _ = server_and_end
    client = _client(server)
    greedy: dict[str, Any] = dict(model="m", messages=ASK, max_tokens=12, temperature=0)
    free = client.chat.completions.create(**greedy).choices[0].message
    zero = client.chat.completions.create(**greedy, extra_body={"thinking_token_budget": 0})
    answer = zero.choices[0].message.content
    thought = (free.model_extra or {})["reasoning_content"]
    assert thought and free.content is None and answer
    none = client.chat.completions.create(**greedy, reasoning_effort="none")  # type: ignore[arg-type]
    assert none.choices[0].message.content == answer
    assert none.usage.completion_tokens_details.reasoning_tokens == 1  # type: ignore[union-attr]
    high = client.chat.completions.create(**greedy, reasoning_effort="high")
    assert (high.choices[0].message.model_extra or {})["reasoning_content"] == thought
    r = client.responses.create(model="m", input=ASK[0]["content"], max_output_tokens=12,
                                temperature=0, reasoning={"effort": "none"})  # type: ignore[typeddict-item]  # fmt: skip
    assert r.output_text == answer and r.reasoning and r.reasoning.effort == "none"
    assert r.usage and r.usage.output_tokens_details.reasoning_tokens == 1
    asked: Any = {"effort": "low", "summary": "auto"}
    low = client.responses.create(model="m", input=ASK[0]["content"], max_output_tokens=12,
                                  temperature=0, reasoning=asked)  # fmt: skip
    assert [i.type for i in low.output] == ["reasoning", "message"]
    assert low.output[0].content[0].text == thought  # type: ignore[union-attr]
    anth = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    args: dict[str, Any] = dict(model="m", max_tokens=12, messages=ASK,
                                extra_body={"temperature": 0})  # fmt: skip
    adaptive = anth.messages.create(**args, thinking={"type": "adaptive"},
                                    output_config={"effort": "low"})  # fmt: skip
    assert [(b.type, getattr(b, "thinking", None)) for b in adaptive.content] == [
        ("thinking", thought)
    ]
    omitted = anth.messages.create(**args, thinking={"type": "adaptive", "display": "omitted"})
    assert all(b.type != "thinking" for b in omitted.content)
    between = anth.messages.create(**args, thinking={"type": "between_tools"})
    assert [(b.type, getattr(b, "text", None)) for b in between.content] == [("text", answer)]
    contents = [{"role": "user", "parts": [{"text": ASK[0]["content"]}]}]
    for level, want in (("LOW", [{"text": thought, "thought": True}]), ("minimal", None)):
        thinking = {"includeThoughts": True, "thinkingLevel": level}
        config = {"maxOutputTokens": 12, "temperature": 0, "thinkingConfig": thinking}
        g = server.post("/v1beta/models/m:generateContent",
                        json={"contents": contents, "generationConfig": config})  # fmt: skip
        assert g.status_code == 200, g.text
        if want is not None:
            assert g.json()["candidates"][0]["content"]["parts"] == want
    thinking = {"thinkingLevel": "high", "thinkingBudget": 4}
    config = {"maxOutputTokens": 12, "thinkingConfig": thinking}
    g = server.post("/v1beta/models/m:generateContent",
                    json={"contents": contents, "generationConfig": config})  # fmt: skip
    assert g.status_code == 400 and "not both" in g.text


@pytest.fixture(scope="module")
def special_server(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path):
    """The same tiny model with the tags as special tokens (some checkpoints mark them so)."""
    yield from _tiny_reasoner(tmp_path_factory, smollm2_path, special=True)


def test_special_tags_split_the_reasoning_from_the_answer(special_server) -> None:
    """Where the tags are special tokens the text keeps them, so the parser splits the
    output at `</think>` (a decode that skipped them ran reasoning and answer together),
    and the gate's budget holds: a budget of 2 closes the reasoning, the answer follows;
    streamed alike; usage counts the reasoning's tokens."""
    server, _ = special_server
    client = _client(server)
    args: dict[str, Any] = dict(model="m", messages=ASK, max_tokens=10, temperature=0,
                                extra_body={"thinking_token_budget": 2})  # fmt: skip
    r = client.chat.completions.create(**args, logprobs=True)
    tokens = _tokens(r)
    assert tokens[2] == "</think>" and "<think>" not in tokens, tokens
    msg = r.choices[0].message
    assert (msg.model_extra or {})["reasoning_content"] == "".join(tokens[:2])
    assert msg.content == "".join(tokens[3:]).lstrip("\n") and msg.content
    assert "</think>" not in msg.content
    details = r.usage.completion_tokens_details  # type: ignore[union-attr]
    assert details is not None and details.reasoning_tokens == 3
    streamed = {"reasoning_content": "", "content": ""}
    for chunk in client.chat.completions.create(**args, stream=True):
        for c in chunk.choices:
            for key in streamed:
                streamed[key] += (
                    (c.delta.model_extra or {}).get(key) or getattr(c.delta, key, None) or ""
                )
    assert streamed == {"reasoning_content": "".join(tokens[:2]), "content": msg.content}
