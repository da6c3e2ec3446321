"""The batch APIs through the official clients on the tiny-model server: `openai`'s files and
batches (chat completions; each output body is the answer the same request gets alone) and
`anthropic`'s message batches (results streamed as JSONL, an invalid request errored in
Anthropic's shape, cancel and delete), and google-genai's batch mode (inline requests, inline
responses with their metadata, under v1 and v1beta)."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import openai
import pytest

QUESTIONS = ["Name a colour.", "Name a fruit.", "Name a city."]


def _chat(question: str) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": question}],
            "max_tokens": 5, "temperature": 0}  # fmt: skip


def _poll(get: Any, done: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = get()
        if done(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_an_openai_chat_batch_answers_as_the_requests_alone(tiny_server) -> None:
    client = openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="none")
    lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": _chat(q)} for i, q in enumerate(QUESTIONS)]  # fmt: skip
    data = "\n".join(json.dumps(x) for x in lines).encode()
    uploaded = client.files.create(file=("questions.jsonl", data), purpose="batch")
    assert uploaded.bytes == len(data) and client.files.retrieve(uploaded.id).filename
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")  # fmt: skip
    batch = _poll(lambda: client.batches.retrieve(batch.id), lambda b: b.status == "completed")
    assert batch.status == "completed", batch
    assert batch.request_counts is not None and batch.request_counts.completed == 3
    assert batch.output_file_id is not None and batch.error_file_id is None
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    assert [x["custom_id"] for x in out] == ["q0", "q1", "q2"]
    for x, question in zip(out, QUESTIONS, strict=True):
        alone = client.chat.completions.create(**_chat(question))
        assert x["response"]["body"]["choices"][0]["message"]["content"] == (
            alone.choices[0].message.content
        )
    assert batch.usage is not None and batch.usage.output_tokens == sum(
        x["response"]["body"]["usage"]["completion_tokens"] for x in out
    )
    assert [b.id for b in client.batches.list()][0] == batch.id
    assert client.files.delete(uploaded.id).deleted


def test_anthropic_message_batches(tiny_server) -> None:
    client = anthropic.Anthropic(base_url=tiny_server.url, api_key="none")
    params = [{"model": "tiny", "max_tokens": 4, "temperature": 0,
               "messages": [{"role": "user", "content": q}]} for q in QUESTIONS]  # fmt: skip
    requests: list[Any] = [{"custom_id": f"q{i}", "params": p} for i, p in enumerate(params)]
    requests.append({"custom_id": "bad", "params": {"model": "tiny", "messages": []}})
    batch = client.messages.batches.create(requests=requests)
    assert batch.processing_status == "in_progress" and batch.results_url is None
    batch = _poll(lambda: client.messages.batches.retrieve(batch.id),
                  lambda b: b.processing_status == "ended")  # fmt: skip
    assert batch.processing_status == "ended" and batch.ended_at is not None
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (3, 1, 0)
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert list(results) == ["q0", "q1", "q2", "bad"]
    for i, param in enumerate(params):
        result = results[f"q{i}"]
        assert result.type == "succeeded"
        sent = {k: v for k, v in param.items() if k != "temperature"}  # (not in this SDK's
        alone = client.messages.create(**sent, extra_body={"temperature": 0})  # signature)
        assert result.message.content == alone.content
    bad = results["bad"]
    assert bad.type == "errored" and bad.error.error.type == "invalid_request_error"
    assert batch.id in [b.id for b in client.messages.batches.list()]
    assert client.messages.batches.delete(batch.id).type == "message_batch_deleted"
    try:
        client.messages.batches.retrieve(batch.id)
        raise AssertionError("a deleted batch was found")
    except anthropic.NotFoundError as e:
        assert e.body["type"] == "error"  # Anthropic's error shape on its paths


def test_anthropic_batch_cancel(tiny_server) -> None:
    client = anthropic.Anthropic(base_url=tiny_server.url, api_key="none")
    params = {"model": "tiny", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
    requests: list[Any] = [{"custom_id": f"r{i}", "params": params} for i in range(40)]
    batch = client.messages.batches.create(requests=requests)
    canceled = client.messages.batches.cancel(batch.id)
    assert canceled.processing_status in ("canceling", "ended")
    assert canceled.cancel_initiated_at is not None
    batch = _poll(lambda: client.messages.batches.retrieve(batch.id),
                  lambda b: b.processing_status == "ended")  # fmt: skip
    counts = batch.request_counts
    assert counts.processing == 0 and counts.canceled >= 30
    assert counts.succeeded + counts.canceled == 40
    kinds = {r.result.type for r in client.messages.batches.results(batch.id)}
    assert "canceled" in kinds
    try:
        client.messages.batches.create(requests=[requests[0], requests[0]])
        raise AssertionError("a duplicate custom_id was taken")
    except anthropic.BadRequestError as e:
        assert "used twice" in str(e)


@pytest.mark.parametrize("version", ["v1", "v1beta"])  # (v1: the SDK's default)
def test_gemini_batch_mode(tiny_server, version: str) -> None:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(base_url=tiny_server.url, api_version=version)
    client = genai.Client(api_key="none", http_options=options)
    config = {"temperature": 0, "max_output_tokens": 4}
    requests: list[Any] = [
        {"contents": [{"role": "user", "parts": [{"text": q}]}], "config": config,
         "metadata": {"key": f"q{i}"}} for i, q in enumerate(QUESTIONS)
    ]  # fmt: skip
    requests.append(
        {"contents": "x", "config": {"max_output_tokens": -5}, "metadata": {"key": "bad"}}
    )
    job = client.batches.create(model="tiny", src=requests, config={"display_name": "three"})
    assert job.name and job.name.startswith("batches/") and job.display_name == "three"
    job = _poll(lambda: client.batches.get(name=job.name), lambda j: j.done)
    assert job.state == "JOB_STATE_SUCCEEDED", job
    assert job.dest is not None and job.dest.inlined_responses is not None
    answers = job.dest.inlined_responses
    assert [a.metadata for a in answers] == [{"key": f"q{i}"} for i in range(3)] + [{"key": "bad"}]
    for answer, question in zip(answers, QUESTIONS, strict=False):
        alone = client.models.generate_content(model="tiny", contents=question, config=config)
        assert answer.response is not None and answer.response.text == alone.text
    assert answers[3].response is None and answers[3].error is not None
    assert job.name in [j.name for j in client.batches.list()]
    client.batches.delete(name=job.name)
    try:
        client.batches.get(name=job.name)
        raise AssertionError("a deleted batch was found")
    except genai.errors.ClientError as e:
        assert e.code == 404
