"""`logit_bias` on the tiny-model server: OpenAI's map of token ids (strings) to a value added
to the logit, on /v1/completions, chat (streamed, n > 1) and the native /generate alike;
+100 all but forces a token, -100 all but bans one, logprobs stay the model's; 400s naming
the field for keys that are no ids, ids past the vocabulary and values out of range."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from radixrt.model.families.loader import load_tokenizer

PROMPT = "one two three four one two three four one two"


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path: Path) -> Any:
    return load_tokenizer(tiny_llama_path)


def _native(server: Any, **sampling: Any) -> dict[str, Any]:
    sp = {"max_new_tokens": 8, "temperature": 0, **sampling}
    r = server.post("/generate", json={"text": PROMPT, "sampling_params": sp})
    assert r.status_code == 200, r.text
    return r.json()


def _completion(server: Any, **body: Any) -> dict[str, Any]:
    r = server.post(
        "/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0, **body}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_a_ban_and_a_push_change_the_greedy_tokens(tiny_server) -> None:
    plain = _native(tiny_server, return_logprob=True)
    ids = plain["output_ids"]
    banned = _native(tiny_server, logit_bias={str(ids[0]): -100}, return_logprob=True)
    assert banned["output_ids"][0] != ids[0] and ids[0] not in banned["output_ids"]
    # logprobs are the model's: the banned run's first token scored without the bias
    first = plain["meta_info"]["output_token_logprobs"][0][0]
    assert banned["meta_info"]["output_token_logprobs"][0][0] < first
    pushed = _native(tiny_server, logit_bias={str(ids[3]): 100})
    assert pushed["output_ids"] == [ids[3]] * 8
    # OpenAI's completions: the same tokens for the same bias (keys as strings of ids)
    assert _completion(tiny_server)["choices"][0]["text"] == plain["text"]
    text = _completion(tiny_server, logit_bias={str(ids[0]): -100})["choices"][0]["text"]
    assert text == banned["text"]


def test_chat_streamed_and_n(tiny_server, tokenizer) -> None:
    token = tokenizer.encode(" yes", add_special_tokens=False)[0]
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 6,
        "temperature": 0.8,
        "seed": 3,
        "n": 2,
        "logit_bias": {str(token): 100},
    }
    r = tiny_server.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    want = tokenizer.decode([token] * 6)
    assert [c["message"]["content"] for c in r.json()["choices"]] == [want, want]
    r = tiny_server.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    texts = {0: "", 1: ""}
    for line in r.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:])["choices"]:
                texts[choice["index"]] += choice["delta"].get("content") or ""
    assert texts == {0: want, 1: want}


@pytest.mark.parametrize(
    ("bias", "fragment"),
    [
        ({"abc": 1}, "key 'abc' is not a token id"),
        ({"-4": 1}, "key '-4' is not a token id"),
        ({"5": 100.5}, "must map at most 1024 token ids to numbers in [-100, 100]"),
        ({"5": -1e308}, "must map at most 1024 token ids to numbers in [-100, 100]"),
        ({"99999": 1}, "logit_bias token id 99999 is outside the vocabulary"),
        ({str(10**30): 1}, "is not a token id"),
        ({str(i): 1 for i in range(1025)}, "must map at most 1024 token ids"),
    ],
)
def test_bad_biases_get_400(tiny_server, bias, fragment) -> None:
    for path, body in (
        ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "logit_bias": bias}),
        ("/v1/chat/completions",
         {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "logit_bias": bias}),
        ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "logit_bias": bias}}),
    ):  # fmt: skip
        r = tiny_server.post(path, json=body)
        assert r.status_code == 400, (path, r.text)
        assert fragment in r.text, (path, r.text)
    r = tiny_server.post(
        "/v1/completions", json={"prompt": "hi", "max_tokens": 2, "logit_bias": {"5": "x"}}
    )
    assert r.status_code == 400 and "logit_bias" in r.text, r.text
    tiny_server.assert_serving()
