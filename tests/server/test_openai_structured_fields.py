"""Constrained output on the OpenAI routes in SGLang's and vLLM's spellings (tiny-model
server): SGLang's regex / ebnf / json_schema, vLLM's structured_outputs and guided_* fields, a
GBNF grammar (also on /generate), and 400s for two constraints at once or a bad one."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

CHAT = [{"role": "user", "content": "Pick one."}]
BOOL_SCHEMA = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
               "additionalProperties": False}  # fmt: skip


def _text(server: Any, chat: bool, **body: Any) -> str:
    if chat:
        r = server.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 24, **body})
    else:
        r = server.post("/v1/completions", json={"prompt": "Answer:", "max_tokens": 24, **body})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return str(choice["message"]["content"] if chat else choice["text"])


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize(
    ("fields", "check"),
    [
        ({"regex": "(yes|no)"}, lambda t: t in ("yes", "no")),
        ({"guided_regex": "[0-9]{3}"}, lambda t: re.fullmatch("[0-9]{3}", t)),
        ({"structured_outputs": {"regex": "x[ab]"}}, lambda t: t in ("xa", "xb")),
        ({"structured_outputs": {"choice": ["red", "blue?", "a|b"]}},
         lambda t: t in ("red", "blue?", "a|b")),
        ({"guided_choice": ["1.5", "(2)"]}, lambda t: t in ("1.5", "(2)")),
        ({"json_schema": BOOL_SCHEMA}, lambda t: isinstance(json.loads(t)["a"], bool)),
        ({"guided_json": json.dumps(BOOL_SCHEMA)}, lambda t: isinstance(json.loads(t)["a"], bool)),
        ({"structured_outputs": {"json": BOOL_SCHEMA}},
         lambda t: isinstance(json.loads(t)["a"], bool)),
        # any object: free keys may run past the tokens here, but it opens an object
        ({"structured_outputs": {"json_object": True}}, lambda t: t.startswith("{")),
        ({"ebnf": 'root ::= "id-" [0-9] [0-9]'}, lambda t: re.fullmatch("id-[0-9]{2}", t)),
        ({"guided_grammar": 'root ::= ("ab" | "cd") "!"'}, lambda t: t in ("ab!", "cd!")),
        ({"structured_outputs": {"grammar": 'start: "ok" | "ko"'}}, lambda t: t in ("ok", "ko")),
    ],
)  # fmt: skip
def test_each_spelling_constrains_the_output(tiny_server, chat, fields, check) -> None:
    text = _text(tiny_server, chat, temperature=0.9, seed=5, **fields)
    assert check(text), (fields, text)


def test_gbnf_on_the_native_api(tiny_server) -> None:
    sp = {"max_new_tokens": 16, "ebnf": 'root ::= "v" [0-9] [0-9]? "."', "temperature": 0.8}
    r = tiny_server.post("/generate", json={"text": "Version:", "sampling_params": sp})
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"v[0-9]{1,2}\.", r.json()["text"]), r.json()["text"]


@pytest.mark.parametrize(
    ("chat", "fields", "fragment"),
    [
        (False, {"regex": "a", "guided_json": {"type": "object"}},
         "give one constraint on the output, not regex, guided_json"),
        (True, {"structured_outputs": {"regex": "a", "choice": ["b"]}},
         "not structured_outputs.regex, structured_outputs.choice"),
        (True, {"regex": "a", "response_format": {"type": "json_object"}},
         "give one constraint on the output: response_format and another"),
        (False, {"structured_outputs": {"choice": []}}, "must be a non-empty list"),
        (False, {"structured_outputs": {"structural_tag": "x"}}, "unknown field"),
        (False, {"guided_choice": "yes"}, "guided_choice"),
        (False, {"ebnf": "root ::= ("}, "invalid ebnf"),
        (False, {"guided_regex": "("}, "invalid regex"),
    ],
)  # fmt: skip
def test_bad_constraints_get_400(tiny_server, chat, fields, fragment) -> None:
    base = {"messages": CHAT} if chat else {"prompt": "hi"}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    r = tiny_server.post(path, json={**base, "max_tokens": 4, **fields})
    assert r.status_code == 400, r.text
    assert fragment in r.text, r.text
    tiny_server.assert_serving()
