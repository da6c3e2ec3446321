"""OpenAI's predicted outputs (`prediction` on chat completions) on the tiny-model server,
speculation off as by default: the same answer with and without a prediction (right or
wrong, streamed, n > 1 with logprobs), usage's accepted and rejected prediction tokens, the
same on /v1/completions (an extension), the native API's `prediction` (text) and
`prediction_ids`, and 400s for predictions it cannot take."""

from __future__ import annotations

import json
from typing import Any

import pytest

MESSAGES = [{"role": "user", "content": "one two three four one two three four one two"}]


@pytest.fixture(scope="module")
def tiny_server(own_tiny_server):
    """This module's own: how deep a step drafts a prediction follows the pass times the
    server has measured (a tiny model's passes are mostly noise)."""
    return own_tiny_server


def _chat(server: Any, **body: Any) -> dict[str, Any]:
    r = server.post("/v1/chat/completions", json={"messages": MESSAGES, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _prediction(text: str) -> dict[str, Any]:
    return {"type": "content", "content": text}


def test_a_prediction_changes_nothing_but_the_speed(tiny_server) -> None:
    plain = _chat(tiny_server, max_tokens=40)
    text = plain["choices"][0]["message"]["content"]
    assert "completion_tokens_details" not in plain["usage"]
    right = _chat(tiny_server, max_tokens=40, prediction=_prediction(text))
    assert right["choices"][0]["message"]["content"] == text
    details = right["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 20, right["usage"]
    parts = {"type": "content", "content": [{"type": "text", "text": "nothing like it"}]}
    wrong = _chat(tiny_server, max_tokens=40, prediction=parts)
    assert wrong["choices"][0]["message"]["content"] == text
    details = wrong["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] < 5 and details["rejected_prediction_tokens"] > 0


def test_streamed_n_samples_with_logprobs(tiny_server) -> None:
    body = {"max_tokens": 30, "n": 2, "logprobs": True, "top_logprobs": 2}
    plain = _chat(tiny_server, **body)
    text = plain["choices"][0]["message"]["content"]
    r = tiny_server.post(
        "/v1/chat/completions",
        json={"messages": MESSAGES, "temperature": 0, "stream": True,
              "stream_options": {"include_usage": True}, "prediction": _prediction(text),
              **body},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    texts, logprobs, usage = {0: "", 1: ""}, {0: [], 1: []}, None
    for line in r.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        usage = event.get("usage") or usage
        for choice in event["choices"]:
            texts[choice["index"]] += choice["delta"].get("content") or ""
            logprobs[choice["index"]] += (choice.get("logprobs") or {}).get("content") or []
    for i in (0, 1):
        assert texts[i] == plain["choices"][i]["message"]["content"]
        want = plain["choices"][i]["logprobs"]["content"]
        assert [e["token"] for e in logprobs[i]] == [e["token"] for e in want]
        assert [e["logprob"] for e in logprobs[i]] == pytest.approx(
            [e["logprob"] for e in want], abs=1e-4
        )
    assert usage is not None
    assert usage["completion_tokens_details"]["accepted_prediction_tokens"] > 20


def test_native_prediction_ids(tiny_server) -> None:
    sp = {"max_new_tokens": 30, "temperature": 0}
    body = {"text": MESSAGES[0]["content"], "sampling_params": sp}
    first = tiny_server.post("/generate", json=body)
    assert first.status_code == 200, first.text
    ids = first.json()["output_ids"]
    again = tiny_server.post(
        "/generate",
        json={"text": MESSAGES[0]["content"], "sampling_params": {**sp, "prediction_ids": ids}},
    )
    assert again.status_code == 200, again.text
    assert again.json()["output_ids"] == ids
    meta = again.json()["meta_info"]
    assert meta["prediction_tokens"] == len(ids) and meta["prediction_accepted_tokens"] > 20


def test_native_prediction_text_and_completions(tiny_server) -> None:
    sp = {"max_new_tokens": 30, "temperature": 0}
    prompts = [MESSAGES[0]["content"], "four three two one four three two one"]
    first = tiny_server.post("/generate", json={"text": prompts, "sampling_params": sp})
    assert first.status_code == 200, first.text
    texts = [r["text"] for r in first.json()]
    for prompt, text in zip(prompts, texts):  # one prompt, text in, the same text out
        r = tiny_server.post(
            "/generate", json={"text": prompt, "sampling_params": {**sp, "prediction": text}}
        )
        assert r.status_code == 200, r.text
        assert r.json()["text"] == text
        # (how deep each step drafts follows the measured pass times: not a fixed count)
        assert r.json()["meta_info"]["prediction_accepted_tokens"] >= 8, r.json()["meta_info"]
    # One sampling dict for a list of prompts: each prompt drafts from the same prediction.
    r = tiny_server.post(
        "/generate", json={"text": prompts, "sampling_params": {**sp, "prediction": texts[0]}}
    )
    assert [x["text"] for x in r.json()] == texts
    counts = {x["meta_info"]["prediction_tokens"] for x in r.json()}
    assert len(counts) == 1 and counts.pop() >= 30
    body = {"prompt": prompts[0], "max_tokens": 30, "temperature": 0}
    plain = tiny_server.post("/v1/completions", json=body).json()
    assert plain["choices"][0]["text"] == texts[0]
    r = tiny_server.post("/v1/completions", json={**body, "prediction": _prediction(texts[0])})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == texts[0]
    details = r.json()["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] >= 8, r.json()["usage"]


@pytest.mark.parametrize(
    ("sampling", "fragment"),
    [
        ({"prediction": 5}, "prediction: must be a string"),
        ({"prediction": ["a"]}, "prediction: must be a string"),
        ({"prediction": "a b", "prediction_ids": [1]}, "not both"),
        ({"prediction": "word " * 2000}, "the prediction has"),
    ],
)
def test_bad_native_predictions_get_400(tiny_server, sampling, fragment) -> None:
    r = tiny_server.post(
        "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2, **sampling}}
    )
    assert r.status_code == 400, r.text
    assert fragment in r.text


@pytest.mark.parametrize(
    ("prediction", "fragment"),
    [
        ({"type": "text", "content": "x"}, "prediction type 'text' is not supported"),
        ({"type": "content"}, "missing required field `content`"),
        ({"type": "content", "content": 5}, "$.prediction.content"),
        ({"type": "content", "content": [{"type": "image_url"}]}, "of type 'image_url'"),
        ({"type": "content", "content": "x", "extra": 1}, "unknown field"),
        ({"type": "content", "content": "word " * 2000}, "the prediction has"),
    ],
)
def test_bad_predictions_get_400(tiny_server, prediction, fragment) -> None:
    r = tiny_server.post(
        "/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 4, "prediction": prediction},
    )
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]


def test_bad_prediction_ids_get_400(tiny_server) -> None:
    cases = [
        ([1, -1], "prediction_ids"),
        ([10**9], "outside the vocabulary"),
        ([7] * 600, "the prediction has 600 tokens"),  # past the 512-token context
    ]
    for ids, fragment in cases:
        r = tiny_server.post(
            "/generate",
            json={"text": "hi", "sampling_params": {"max_new_tokens": 2, "prediction_ids": ids}},
        )
        assert r.status_code == 400, r.text
        assert fragment in r.text
    tiny_server.assert_serving()
