"""Tool calls on a model whose tokenizer has `<tool_call>` and `</tool_call>` as added tokens,
not special (as Qwen2.5's and Qwen3's are) or special (as some Hermes-format models mark
them): a forced call is written with those tokens and parsed, and in `auto` the model may open
a call with its `<tool_call>` token (a tiny random Qwen2 with SmolLM2's tokenizer plus the two
tokens; a logit bias makes the random model pick them). Text tokens on the llguidance backend,
special ones on the default backend (their grammars are Lark: llguidance's in both)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from tiny_models import make_tiny
from transformers import AddedToken

from radixrt.model.families.loader import load_tokenizer

from .server_proc import start_server

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module", params=[False, True], ids=["text", "special"])
def server_and_ids(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path
):
    special = request.param
    folder = make_tiny(tmp_path_factory.mktemp("tool_tokens"), smollm2_path, "qwen2",
                       vocab_size=49216)  # fmt: skip
    tok = load_tokenizer(smollm2_path)
    tok.add_tokens([AddedToken(t, special=special, normalized=False)
                    for t in ("<tool_call>", "</tool_call>")], special_tokens=special)  # fmt: skip
    tok.save_pretrained(folder)
    ids = tok.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    assert ids == [49152, 49153] and tok("<tool_call>\n").input_ids[0] == ids[0]
    assert tok.added_tokens_decoder[ids[0]].special is special
    backend = "auto" if special else "llguidance"
    server = start_server(folder, tmp_path_factory.mktemp("tool_tokens_server"),
                          "--grammar-backend", backend)  # fmt: skip
    try:
        yield server, ids
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_a_forced_call_uses_the_added_tokens(server_and_ids) -> None:
    server, (opener, closer) = server_and_ids
    for seed in range(3):
        r = _client(server).chat.completions.create(
            model="m", messages=ASK, tools=[TOOL], tool_choice="required", max_tokens=60,
            temperature=1, seed=seed, logprobs=True,
        )  # fmt: skip
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        call = choice.message.tool_calls[0].function
        assert call.name == "get_weather" and len(json.loads(call.arguments)["city"]) <= 12
        tokens = [t.token for t in choice.logprobs.content]
        assert tokens[0] == "<tool_call>" and "</tool_call>" in tokens, tokens


def test_auto_opens_a_call_with_the_added_token(server_and_ids) -> None:
    """The bias keeps the model calling (even a string may hold the token, as text): the
    first token opens a call, and the calls parsed are whole."""
    server, (opener, _) = server_and_ids
    r = _client(server).chat.completions.create(
        model="m", messages=ASK, tools=[TOOL], tool_choice="auto", max_tokens=40,
        temperature=0, logit_bias={str(opener): 100}, logprobs=True,
    )  # fmt: skip
    choice = r.choices[0]
    assert choice.logprobs.content[0].token == "<tool_call>", choice
    assert choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        assert call.function.name == "get_weather"
        assert len(json.loads(call.function.arguments)["city"]) <= 12
