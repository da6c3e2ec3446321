"""Every kind of bad input gets a 400 with a JSON error message; the scheduler never notices."""

from __future__ import annotations

import pytest

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]

# (path, raw body or JSON object, a fragment the error message must contain)
ARRAY_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
CASES = [
    ("/generate", b'{"text": "hi", ', "malformed"),
    ("/generate", b"not json", "malformed"),
    ("/generate", {"text": "hi", "sampling_params": {"temprature": 0}}, "temprature"),
    ("/generate", {"text": "hi", "sampling_params": {"temperature": "hot"}}, "temperature"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": "5"}}, "max_new_tokens"),
    ("/generate", {"text": "hi", "sampling_params": {"ignore_eos": "yes"}}, "ignore_eos"),
    ("/generate", {"text": "hi", "sampling_params": {"top_p": 0}}, "top_p"),
    ("/generate", {"text": "hi", "sampling_params": {"temperature": -1}}, "temperature"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": -3}}, "max_new_tokens"),
    ("/generate", {"text": "hi", "sampling_params": {"n": 1000}}, "n="),
    ("/generate", {"text": "hi", "sampling_params": {"stop_token_ids": [10**7]}}, "vocabulary"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 100000}}, "context"),
    ("/generate", {"text": ""}, "empty"),
    ("/generate", {"text": []}, "empty"),
    ("/generate", {"input_ids": []}, "empty"),
    ("/generate", {"input_ids": [1, "two"]}, "input_ids"),
    ("/generate", {"input_ids": [10**7]}, "vocabulary"),
    ("/generate", {"text": "hi", "input_ids": [1]}, "exactly one"),
    ("/generate", {"text": "hi", "streem": True}, "streem"),
    ("/generate", {"text": "hi", "stream": "yes"}, "stream"),
    (
        "/generate",
        {"text": "hi", "top_logprobs_num": 5000, "return_logprob": True},
        "top_logprobs_num",
    ),
    ("/generate", {"text": ["a", "b"], "sampling_params": [{}]}, "sampling_params"),
    ("/generate", [1, 2], "object"),
    ("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 100000}, "context"),
    ("/v1/completions", {"model": "m", "prompt": "hi", "n": 1000}, "n="),
    ("/v1/completions", {"model": "m", "prompt": "hi", "temperature": -2}, "temperature"),
    ("/v1/completions", {"model": "m", "prompt": "hi", "logprobs": 50}, "logprobs"),
    ("/v1/completions", {"model": "m", "prompt": ""}, "empty"),
    ("/v1/completions", {"model": "m"}, "prompt"),
    ("/v1/completions", {"model": "m", "prompt": "hi", "best_of": 3}, "best_of"),
    ("/v1/chat/completions", {"model": "m", "messages": []}, "messages"),
    ("/v1/chat/completions", {"model": "m", "messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"model": "m", "messages": FRANCE, "top_p": 2}, "top_p"),
    ("/v1/chat/completions", {"model": "m", "messages": FRANCE, "tools": [ARRAY_TOOL]}, "tools"),
    ("/v1/chat/completions", {"model": "m", "messages": FRANCE, "max_tokens": 10**6}, "context"),
    ("/v1/chat/completions", {"model": "m", "messages": FRANCE, "top_logprobs": 2}, "logprobs"),
    ("/abort_request", {}, "rid"),
]


@pytest.mark.parametrize(("path", "body", "fragment"), CASES)
def test_bad_input_gets_400(api_server, path: str, body: object, fragment: str) -> None:
    raw = {"content": body, "headers": {"content-type": "application/json"}}
    kw = raw if isinstance(body, bytes) else {"json": body}
    r = api_server.post(path, **kw)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert fragment.lower() in message.lower(), message


def test_server_still_healthy_after_bad_input(api_server) -> None:
    assert api_server.get("/health").status_code == 200
    out = api_server.post(
        "/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 2}}
    )
    assert out.status_code == 200
    api_server.wait_idle_and_whole()


def test_unknown_route_and_method(api_server) -> None:
    assert api_server.get("/nope").status_code == 404
    assert api_server.get("/generate").status_code == 405
