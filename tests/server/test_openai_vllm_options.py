"""vLLM's extra request fields on the OpenAI routes (tiny-model server): chat's template
options (continue_final_message: the answer goes on from an assistant's text;
add_generation_prompt false; chat_template_kwargs), the same on /tokenize,
include_stop_str_in_output, and 400s for what cannot be done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from radixrt.model.families.loader import load_tokenizer

ASKED = [{"role": "user", "content": "Count from one to ten."}]
OPEN = [*ASKED, {"role": "assistant", "content": "One, two, three,"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path: Path) -> Any:
    return load_tokenizer(tiny_llama_path)


def _chat(server: Any, **body: Any) -> dict[str, Any]:
    r = server.post("/v1/chat/completions", json={"max_tokens": 8, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_continue_final_message_goes_on_from_the_assistants_text(tiny_server, tokenizer) -> None:
    got = _chat(tiny_server, messages=OPEN, continue_final_message=True,
                add_generation_prompt=False)  # fmt: skip
    text = tokenizer.apply_chat_template(OPEN, tokenize=False, continue_final_message=True)
    assert text.endswith(OPEN[-1]["content"])
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert got["usage"]["prompt_tokens"] == len(ids)
    r = tiny_server.post("/v1/completions", json={"prompt": ids, "max_tokens": 8, "temperature": 0})
    assert got["choices"][0]["message"]["content"] == r.json()["choices"][0]["text"]
    counted = tiny_server.post(
        "/tokenize", json={"messages": OPEN, "continue_final_message": True}
    ).json()
    assert counted["tokens"] == ids


def test_without_the_generation_prompt_and_with_template_kwargs(tiny_server, tokenizer) -> None:
    bare = _chat(tiny_server, messages=ASKED, add_generation_prompt=False)
    text = tokenizer.apply_chat_template(ASKED, tokenize=False, add_generation_prompt=False)
    assert bare["usage"]["prompt_tokens"] == len(tokenizer.encode(text, add_special_tokens=False))
    plain = _chat(tiny_server, messages=ASKED)
    kwargs = _chat(tiny_server, messages=ASKED, chat_template_kwargs={"enable_thinking": False})
    assert kwargs["choices"][0]["message"] == plain["choices"][0]["message"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": ASKED, "continue_final_message": True},
         "continue_final_message needs the last message to be an assistant's text"),
        ({"messages": [*ASKED, {"role": "assistant", "content": " "}],
          "continue_final_message": True},
         "continue_final_message needs the last message to be an assistant's text"),
        ({"messages": ASKED, "chat_template_kwargs": {"tools": []}},
         "chat_template_kwargs may not set tools"),
        ({"messages": ASKED, "chat_template_kwargs": {"add_generation_prompt": False}},
         "chat_template_kwargs may not set add_generation_prompt"),
        ({"messages": ASKED, "chat_template_kwargs": {"x": "y" * 5000}},
         "chat_template_kwargs is longer than 4096 characters"),
        ({"messages": ASKED, "chat_template_kwargs": {"eos_token": "x" * 100}},
         "chat_template_kwargs may not set eos_token"),
        ({"messages": ASKED, "chat_template_kwargs": {"x": {"y": 1}}},
         "values are strings, numbers, booleans or null"),
        ({"messages": ASKED, "chat_template_kwargs": [1]}, "invalid request"),
    ],
)  # fmt: skip
def test_bad_options_get_400(tiny_server, body, fragment) -> None:
    for path in ("/v1/chat/completions", "/tokenize"):
        r = tiny_server.post(path, json=body)
        assert r.status_code == 400, (path, r.text)
        assert fragment in r.text, (path, r.text)
    tiny_server.assert_serving()


def test_include_stop_str_in_output(tiny_server) -> None:
    body = {"prompt": "one two three", "max_tokens": 12, "temperature": 0}
    free = tiny_server.post("/v1/completions", json=body).json()["choices"][0]["text"]
    at = next(k for k in range(1, len(free) - 2) if free.index(free[k : k + 2]) == k)
    stop = free[at : at + 2]
    cut = tiny_server.post("/v1/completions", json={**body, "stop": [stop]}).json()
    kept = tiny_server.post(
        "/v1/completions", json={**body, "stop": [stop], "include_stop_str_in_output": True}
    ).json()
    assert cut["choices"][0]["text"] == free[:at]
    assert kept["choices"][0]["text"] == free[: at + 2]
    sglang = tiny_server.post(
        "/v1/completions", json={**body, "stop": [stop], "no_stop_trim": True}
    ).json()
    assert sglang["choices"][0]["text"] == free[: at + 2]
    r = tiny_server.post(
        "/v1/completions",
        json={**body, "no_stop_trim": True, "include_stop_str_in_output": False},
    )
    assert r.status_code == 400 and "disagree" in r.text
