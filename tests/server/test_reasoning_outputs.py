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


@pytest.fixture(scope="module")
def server_and_end(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path):
    folder = make_tiny(tmp_path_factory.mktemp("reasoning"), smollm2_path, "llama",
                       vocab_size=49216)  # fmt: skip
    tok = load_tokenizer(smollm2_path)
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in ("<think>", "</think>")])  # fmt: skip
    tok.save_pretrained(folder)
    (end,) = tok.convert_tokens_to_ids(["</think>"])
    server = start_server(folder, tmp_path_factory.mktemp("reasoning_server"),
                          "--reasoning-parser", "deepseek_r1")  # fmt: skip
    try:
        yield server, end
        server.wait_idle_and_whole()
    finally:
        server.stop()


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
