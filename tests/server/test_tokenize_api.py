"""POST /tokenize, POST /detokenize and GET /tokenizer_info on the tiny-model server (vLLM's
shapes): text and chat counts equal what the completions routes are charged, the round trip,
token strings, and 400s for what they cannot take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from radixrt.model.families.loader import load_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog."
MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path: Path) -> Any:
    return load_tokenizer(tiny_llama_path)


def _post(server: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = server.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_text_round_trip_and_counts(tiny_server, tokenizer) -> None:
    got = _post(tiny_server, "/tokenize", {"prompt": TEXT})
    assert got["tokens"] == tokenizer.encode(TEXT) and got["count"] == len(got["tokens"])
    assert got["max_model_len"] == 512 and got["token_strs"] is None
    usage = _post(tiny_server, "/v1/completions", {"prompt": TEXT, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == got["count"]
    strs = _post(tiny_server, "/tokenize", {"prompt": TEXT, "return_token_strs": True})
    assert strs["token_strs"] == tokenizer.convert_ids_to_tokens(got["tokens"])
    back = _post(tiny_server, "/detokenize", {"tokens": got["tokens"]})
    assert back == {"prompt": TEXT}
    plain = _post(tiny_server, "/tokenize", {"prompt": TEXT, "add_special_tokens": False})
    assert plain["tokens"] == tokenizer.encode(TEXT, add_special_tokens=False)


def test_a_chat_counts_as_chat_completions_charge_it(tiny_server, tokenizer) -> None:
    got = _post(tiny_server, "/tokenize", {"messages": MESSAGES, "model": "default"})
    body = {"messages": MESSAGES, "max_tokens": 1}
    usage = _post(tiny_server, "/v1/chat/completions", body)["usage"]
    assert got["count"] == usage["prompt_tokens"]
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert got["tokens"] == tokenizer.encode(text, add_special_tokens=False)
    bare = _post(tiny_server, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": False})
    assert bare["count"] < got["count"]


def test_tokenizer_info(tiny_server, tokenizer) -> None:
    r = tiny_server.get("/tokenizer_info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["eos_token"] == tokenizer.eos_token
    assert info["chat_template"] == tokenizer.chat_template
    assert info["model_max_length"] == 512 and info["vocab_size"] == len(tokenizer)


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/tokenize", {}, "give prompt (text) or messages"),
        ("/tokenize", {"prompt": "a", "messages": MESSAGES}, "give prompt (text) or messages"),
        ("/tokenize", {"messages": []}, "messages must be a non-empty list"),
        ("/tokenize", {"prompt": 5}, "invalid request"),
        ("/tokenize", {"prompt": "a", "tools": []}, "unknown field"),
        ("/tokenize", {"prompt": "a", "continue_final_message": True}, "apply to messages"),
        ("/detokenize", {"tokens": [1, 10**9]}, "token id 1000000000 is outside the vocabulary"),
        ("/detokenize", {"tokens": [-1]}, "token id -1 is outside the vocabulary"),
        ("/detokenize", {"tokens": "12"}, "invalid request"),
        ("/detokenize", {}, "missing required field `tokens`"),
    ],
)
def test_bad_bodies_get_400(tiny_server, path, body, fragment) -> None:
    r = tiny_server.post(path, json=body)
    assert r.status_code == 400, r.text
    assert fragment in r.text, r.text


def test_text_past_the_character_bound_gets_400(tiny_server, tokenizer) -> None:
    """The server's --max-prompt-chars (by default the context times the longest token)."""
    most = 512 * max(map(len, tokenizer.get_vocab()))
    r = tiny_server.post("/tokenize", json={"prompt": "x" * (most + 1)})
    assert r.status_code == 400 and "--max-prompt-chars" in r.text, r.text[:300]
    long = _post(tiny_server, "/tokenize", {"prompt": "word " * 2000})  # past the context: counted
    assert long["count"] > 512
    tiny_server.assert_serving()
