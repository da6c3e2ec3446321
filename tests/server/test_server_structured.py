"""Constrained generation over HTTP: /generate with every schema and regex in one batch, the
OpenAI `response_format`, and bad specs refused with 400 before they are queued."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from grammar.structured_specs import REGEXES, SCHEMAS, check_regex, check_schema

PERSON = SCHEMAS[0][1]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_batch_of_every_spec_and_a_free_prompt(api_server, temperature) -> None:
    texts = [p for p, _ in SCHEMAS] + [p for p, _ in REGEXES] + ["Once upon a time"]
    common = {"temperature": temperature, "max_new_tokens": 96}
    params = [{"json_schema": s, "seed": i, **common} for i, (_, s) in enumerate(SCHEMAS)]
    params += [{"regex": r, "seed": i, **common} for i, (_, r) in enumerate(REGEXES)]
    params += [{"temperature": temperature, "seed": 0, "max_new_tokens": 8, "ignore_eos": True}]
    r = api_server.post("/generate", json={"text": texts, "sampling_params": params})
    assert r.status_code == 200, r.text
    results = r.json()
    for out, (_, schema) in zip(results, SCHEMAS):
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        check_schema(out["text"], schema)
    for out, (_, regex) in zip(results[len(SCHEMAS) :], REGEXES):
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        check_regex(out["text"], regex)
    assert results[-1]["meta_info"]["completion_tokens"] == 8
    api_server.wait_idle_and_whole()


@pytest.mark.parametrize(
    "question, response_format, schema",
    [
        (
            "Describe a person in JSON.",
            {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
            PERSON,
        ),
        (
            'What is 2 + 2? Reply in JSON with the key "answer".',
            {"type": "json_object"},
            {"type": "object"},
        ),
    ],
)
def test_openai_response_format(api_server, question, response_format, schema) -> None:
    r = api_server.post(
        "/v1/chat/completions",
        json={
            "model": "m",
            "messages": [{"role": "user", "content": question}],
            "temperature": 0,
            "max_tokens": 64,
            "response_format": response_format,
        },
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    check_schema(choice["message"]["content"], schema)
    api_server.wait_idle_and_whole()


def test_openai_response_format_with_every_schema(api_server) -> None:
    def ask(i: int) -> tuple[dict, dict]:
        prompt, schema = SCHEMAS[i]
        r = api_server.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 1.0,
                "seed": i,
                "max_tokens": 96,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": f"s{i}", "schema": schema},
                },
            },
        )
        assert r.status_code == 200, r.text
        return r.json()["choices"][0], schema

    with ThreadPoolExecutor(len(SCHEMAS)) as pool:
        answers = list(pool.map(ask, range(len(SCHEMAS))))
    for choice, schema in answers:
        assert choice["finish_reason"] == "stop", choice
        check_schema(choice["message"]["content"], schema)
    api_server.wait_idle_and_whole()


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
BAD = [
    ("/generate", {"text": "hi", "sampling_params": {"regex": "a(b"}}, "invalid regex"),
    (
        "/generate",
        {"text": "hi", "sampling_params": {"json_schema": {"type": "nope"}}},
        "invalid json_schema",
    ),
    (
        "/generate",
        {"text": "hi", "sampling_params": {"json_schema": "{not json"}},
        "invalid json_schema",
    ),
    ("/generate", {"text": "hi", "sampling_params": {"ebnf": "start: ("}}, "invalid ebnf"),
    ("/generate", {"text": "hi", "sampling_params": {"regex": 5}}, "regex"),
    ("/generate", {"text": "hi", "sampling_params": {"grammar": "x"}}, "grammar"),
    ("/generate", {"text": "hi", "sampling_params": {"regex": "a", "ebnf": "b"}}, "at most one"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "xml"}}, "xml"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema"}}, "schema"),
    (
        "/v1/chat/completions",
        {
            **CHAT,
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}},
        },
        "invalid",
    ),
]


@pytest.mark.parametrize(("path", "body", "fragment"), BAD)
def test_bad_specs_get_400_and_the_server_keeps_serving(api_server, path, body, fragment):
    r = api_server.post(path, json=body)
    assert r.status_code == 400, r.text
    assert fragment.lower() in r.json()["error"]["message"].lower(), r.text
    ok = api_server.post(
        "/generate",
        json={"text": "My pet is a ", "sampling_params": {"regex": "(cat|dog)", "temperature": 0}},
    )
    assert ok.status_code == 200 and ok.json()["text"] in ("cat", "dog")
    assert json.loads(api_server.get("/health").text)["status"] == "ok"


CITY = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "country": {"type": "string"}},
    "required": ["name", "country"],
}


def test_outputs_fit_their_budget_and_a_budget_too_small_gets_400(api_server) -> None:
    """Every budget from the schema's minimum up ends with valid JSON (`stop`); below the
    minimum the request is refused with a 400 that names it."""
    email = r"[a-z]+@[a-z]+\.(com|org)"
    outs = []
    for budget in (6, 7, 9):
        r = api_server.post(
            "/generate",
            json={
                "text": "My e-mail address is ",
                "sampling_params": {
                    "regex": email,
                    "temperature": 1.0,
                    "seed": budget,
                    "max_new_tokens": budget,
                },
            },
        )
        assert r.status_code == 200, r.text
        outs.append(r.json())
    for out in outs:
        check_regex(out["text"], email)
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
    for max_tokens in (4, 12, 20):
        r = api_server.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "Describe Tokyo in JSON."}],
                "temperature": 0,
                "max_tokens": max_tokens,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "city", "schema": CITY},
                },
            },
        )
        if max_tokens == 4:
            assert r.status_code == 400, r.text
            assert "max_new_tokens is 4" in r.text and "shortest output" in r.text
            continue
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        assert r.json()["usage"]["completion_tokens"] <= max_tokens
        check_schema(choice["message"]["content"], CITY)
    api_server.wait_idle_and_whole()
