"""The HTTP API against a real SmolLM2 server: the openai client, /generate, cache reuse,
concurrency, client disconnects, abort, flush and metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import openai
import pytest

FRANCE_ANSWER = "The capital of France is Paris."
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(api_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="unused", max_retries=0)


def sse_data(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]


def test_health_model_info_and_models(api_server, client) -> None:
    assert api_server.get("/health").json() == {"status": "ok"}
    (line,) = [x for x in api_server.log().splitlines() if "serving" in x]
    assert "KV pool 4096 tokens (" in line and "GiB" in line and api_server.url in line
    assert "window pool" not in line  # SmolLM2 has no sliding-window layers
    info = api_server.get("/get_model_info").json()
    assert info["context_length"] == 8192 and "im_start" in info["chat_template"]
    assert info["model_path"]
    (model,) = client.models.list().data
    assert model.id == info["served_model_name"]
    server_info = api_server.get("/get_server_info").json()
    assert server_info["scheduler_config"]["chunked_prefill_size"] is None  # not given
    assert server_info["effective_chunked_prefill_size"] == 512  # the CPU default


def test_openai_chat_and_cached_tokens(client) -> None:
    first = client.chat.completions.create(model="m", messages=FRANCE, max_tokens=16, temperature=0)
    assert first.choices[0].message.content == FRANCE_ANSWER
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.prompt_tokens_details.cached_tokens >= 0  # always present
    second = client.chat.completions.create(
        model="m", messages=FRANCE, max_tokens=16, temperature=0
    )
    assert second.choices[0].message.content == FRANCE_ANSWER
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    assert second.usage.prompt_tokens == first.usage.prompt_tokens


def test_openai_completions(client) -> None:
    out = client.completions.create(
        model="m", prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2
    )
    choice = out.choices[0]
    assert choice.text.startswith(" Paris") and choice.finish_reason == "length"
    assert len(choice.logprobs.tokens) == 4 and len(choice.logprobs.top_logprobs[0]) == 2
    assert out.usage.completion_tokens == 4 and out.usage.prompt_tokens_details is not None
    batch = client.completions.create(
        model="m", prompt=["One, two,", "A, B,"], max_tokens=3, temperature=0, n=2, seed=1
    )
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.choices[0].text == batch.choices[1].text  # greedy: the samples agree


def test_openai_streaming(client) -> None:
    full = (
        client.chat.completions.create(model="m", messages=FRANCE, max_tokens=16, temperature=0)
        .choices[0]
        .message.content
    )
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=FRANCE,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0
    stopped = list(
        client.chat.completions.create(
            model="m",
            messages=FRANCE,
            max_tokens=16,
            temperature=0,
            top_p=0.9,
            stream=True,
            stop=[" Paris"],
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in stopped) == "The capital of France is"
    assert stopped[-1].choices[0].finish_reason == "stop"
    pieces = list(
        client.completions.create(
            model="m", prompt="1, 2, 3,", max_tokens=6, temperature=0, stream=True
        )
    )
    plain = client.completions.create(model="m", prompt="1, 2, 3,", max_tokens=6, temperature=0)
    assert "".join(p.choices[0].text for p in pieces) == plain.choices[0].text


def test_openai_chat_logprobs_and_seeded_samples(client) -> None:
    out = client.chat.completions.create(
        model="m", messages=FRANCE, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
    )
    content = out.choices[0].logprobs.content
    assert [c.token for c in content][:2] == ["The", " capital"]
    assert all(len(c.top_logprobs) == 3 and c.logprob <= 0 for c in content)
    params = dict(model="m", messages=FRANCE, max_tokens=8, temperature=1.0, seed=7, n=2)
    a = client.chat.completions.create(**params)
    b = client.chat.completions.create(**params)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]


def test_generate_single_batch_and_ids(api_server, chat_prompt) -> None:
    params = {"temperature": 0, "max_new_tokens": 16}
    one = api_server.post("/generate", json={"text": chat_prompt, "sampling_params": params})
    out = one.json()
    assert out["text"] == FRANCE_ANSWER
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": 2}
    assert meta["completion_tokens"] == len(out["output_ids"]) and meta["prompt_tokens"] > 0
    assert meta["e2e_latency"] > 0 and "cached_tokens" in meta
    batch = api_server.post(
        "/generate", json={"text": [chat_prompt, "1, 2, 3,"], "sampling_params": params}
    ).json()
    assert isinstance(batch, list) and batch[0]["text"] == FRANCE_ANSWER
    ids = api_server.post(
        "/generate", json={"input_ids": [504, 3575, 282], "sampling_params": {"max_new_tokens": 2}}
    ).json()
    assert ids["meta_info"]["prompt_tokens"] == 3 and len(ids["output_ids"]) == 2


def test_generate_streaming_is_cumulative(api_server, chat_prompt) -> None:
    body = {
        "text": chat_prompt,
        "sampling_params": {"temperature": 0, "max_new_tokens": 16},
        "stream": True,
    }
    with httpx.stream("POST", api_server.url + "/generate", json=body, timeout=120) as r:
        assert r.status_code == 200
        data = sse_data(r)
    assert data[-1] == "[DONE]"
    texts = [json.loads(d)["text"] for d in data[:-1]]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert texts[-1] == FRANCE_ANSWER
    assert json.loads(data[-2])["meta_info"]["finish_reason"]["type"] == "stop"


def test_generate_logprobs_and_prompt_only(api_server) -> None:
    text = "The capital of France is Paris. The capital of Spain is"
    out = api_server.post(
        "/generate",
        json={
            "text": text,
            "sampling_params": {"temperature": 0, "max_new_tokens": 3},
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": 2,
        },
    ).json()
    meta = out["meta_info"]
    assert len(meta["output_token_logprobs"]) == 3 and len(meta["output_top_logprobs"][0]) == 2
    assert [t for _, t, _ in meta["output_token_logprobs"]] == out["output_ids"]
    assert len(meta["input_token_logprobs"]) == meta["prompt_tokens"]
    assert meta["input_token_logprobs"][0][0] is None
    score = api_server.post(
        "/generate",
        json={
            "text": text,
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        },
    ).json()
    assert score["output_ids"] == [] and score["meta_info"]["finish_reason"]["type"] == "length"
    assert len(score["meta_info"]["input_token_logprobs"]) == meta["prompt_tokens"]
    again = api_server.post(
        "/generate", json={"text": text, "sampling_params": {"max_new_tokens": 0}}
    ).json()
    assert again["meta_info"]["cached_tokens"] > 0  # max_new_tokens 0 warmed the prefix


def test_64_concurrent_requests(api_server) -> None:
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=80)
        async with httpx.AsyncClient(base_url=api_server.url, timeout=300, limits=limits) as c:
            return await asyncio.gather(
                *[
                    c.post(
                        "/generate",
                        json={
                            "text": f"Request number {i}:",
                            "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
                        },
                    )
                    for i in range(64)
                ]
            )

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [200] * 64
    assert all(r.json()["meta_info"]["completion_tokens"] == 6 for r in responses)
    api_server.wait_idle_and_whole()


def test_disconnect_mid_stream_frees_slots(api_server) -> None:
    before = api_server.wait_idle_and_whole()["generated_tokens"]
    body = {
        "text": "Tell me a long story.",
        "stream": True,
        "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
    }
    with httpx.stream("POST", api_server.url + "/generate", json=body, timeout=120) as r:
        got: list[str] = []
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(line)
            if len(got) == 3:
                break
    after = api_server.wait_idle_and_whole()["generated_tokens"]
    assert after - before < 400  # aborted, not run to the end


def test_disconnect_while_waiting_frees_slots(api_server) -> None:
    before = api_server.wait_idle_and_whole()["generated_tokens"]
    body = {
        "text": "Tell me another long story.",
        "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(api_server.url + "/generate", json=body, timeout=1.5)
    after = api_server.wait_idle_and_whole()["generated_tokens"]
    assert after - before < 400


def test_abort_request_by_exact_rid_and_flush_cache(api_server) -> None:
    body = {
        "text": "Count to a thousand:",
        "rid": "abort-me",
        "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
    }
    result: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: result.append(api_server.post("/generate", json=body)))
    thread.start()
    deadline = time.monotonic() + 60
    while api_server.get("/get_server_info").json()["num_running_reqs"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert api_server.post("/flush_cache").status_code == 409  # a request is running
    unknown = api_server.post("/abort_request", json={"rid": "abort"})  # not a prefix match
    assert unknown.status_code == 200 and unknown.json() == {"success": True}
    assert api_server.post("/abort_request", json={"rid": "abort-me"}).status_code == 200
    thread.join(60)
    meta = result[0].json()["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["completion_tokens"] < 400
    api_server.wait_idle_and_whole()
    assert api_server.post("/flush_cache").json() == {"success": True, "cleared": ["device"]}
    info = api_server.wait_idle_and_whole()
    assert info["evictable_tokens"] == 0 and info["free_tokens"] == info["max_total_tokens"]


def test_metrics(api_server) -> None:
    api_server.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 2}})
    text = api_server.get("/metrics").text
    for name in (
        "radixrt_prompt_tokens_total",
        "radixrt_generation_tokens_total",
        "radixrt_cache_hit_rate",
        "radixrt_num_queued_reqs",
        "radixrt_token_usage",
        "radixrt_time_to_first_token_seconds_bucket",
    ):
        assert name in text


def test_extra_key_separates_cache_namespaces(api_server) -> None:
    def cached(key: str) -> int:
        body = {
            "text": "A sentence that only this test sends, about namespaces.",
            "sampling_params": {"max_new_tokens": 1},
            "extra_key": key,
        }
        return api_server.post("/generate", json=body).json()["meta_info"]["cached_tokens"]

    cached("tenant-a")
    assert cached("tenant-b") == 0
    assert cached("tenant-a") > 0
