"""Hostile and careless input against a real server on the tiny model: values the process cannot
carry, oversized work, other clients' rids, bad messages on the scheduler channel. Each test
ends with /health fast, a normal request served, the pool whole and nothing locked."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import msgspec
import pytest
import zmq

JSON = {"content-type": "application/json"}  # a body is refused without it
BIG = 10**23  # over int64: msgpack cannot carry it
HI = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}

# (path, body, fragment the 400's message must contain)
UNCARRIABLE = [
    ("/generate", {"text": "hi", "sampling_params": {"seed": BIG}}, "seed"),
    ("/generate", {"text": "hi", "sampling_params": {"top_k": BIG}}, "top_k"),
    ("/generate", {"text": "hi", "sampling_params": {"top_k": 10**6}}, "top_k"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": BIG}}, "max_new_tokens"),
    ("/generate", {"text": "hi", "sampling_params": {"n": BIG}}, "n="),
    ("/generate", {"text": "hi", "sampling_params": {"stop_token_ids": [BIG]}}, "stop_token"),
    ("/generate", {"text": "hi", "sampling_params": {"min_new_tokens": BIG}}, "min_new_tokens"),
    (
        "/generate",
        {"text": "hi", "return_logprob": True, "logprob_start_len": BIG},
        "logprob_start_len",
    ),
    (
        "/generate",
        {"text": "hi", "return_logprob": True, "logprob_start_len": 7},
        "logprob_start_len",
    ),
    (
        "/generate",
        {"text": "hi", "return_logprob": True, "top_logprobs_num": BIG},
        "top_logprobs_num",
    ),
    (
        "/generate",
        {"text": "hi", "sampling_params": {"repetition_penalty": 1e-40}},
        "repetition_penalty",
    ),
    ("/generate", {"text": "hi", "sampling_params": {"temperature": 3e38}}, "temperature"),
    ("/generate", {"text": "hi", "sampling_params": {"temperature": 1e300}}, "temperature"),
    ("/generate", {"input_ids": [BIG]}, "input_ids"),
    ("/generate", {"text": "hi", "rid": "r" * 300}, "rid"),
    ("/v1/completions", {"model": "m", "prompt": "hi", "seed": BIG}, "seed"),
    ("/v1/completions", {"model": "m", "prompt": "hi", "top_k": BIG}, "top_k"),
    (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": -BIG},
        "seed",
    ),
]


@pytest.mark.parametrize(("path", "body", "fragment"), UNCARRIABLE)
def test_values_the_process_cannot_carry_get_400(tiny_server, path, body, fragment) -> None:
    r = tiny_server.post(path, json=body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("where", ["input_ids", "json_schema", "text"])
def test_deeply_nested_json_gets_400(tiny_server, where: str) -> None:
    for depth in (900, 100_000):  # under and over Python's recursion limit
        deep = "[" * depth + "]" * depth
        body = {
            "input_ids": '{"input_ids": %s}',
            "json_schema": '{"text": "hi", "sampling_params": {"json_schema": %s}}',
            "text": '{"text": %s}',
        }[where] % deep
        r = tiny_server.post("/generate", content=body.encode(), headers=JSON)
        assert r.status_code == 400, (depth, r.text[:300])
        assert r.json()["error"]["message"]
    tiny_server.assert_serving()


def test_failing_requests_leave_nothing_registered(tiny_server) -> None:
    """Twice --max-queued-requests (4) failing requests, then a normal one and a flush."""
    for i in range(8):
        path, body, _ = UNCARRIABLE[i % len(UNCARRIABLE)]
        assert tiny_server.post(path, json=body).status_code == 400
    assert tiny_server.post("/generate", json=HI).status_code == 200
    info = tiny_server.wait_idle_and_whole()
    assert info["num_inflight_reqs"] == 0
    assert tiny_server.post("/flush_cache").status_code == 200
    tiny_server.assert_serving()


def test_sampling_edge_cases_are_served(tiny_server) -> None:
    """Rows that used to sample NaN: every token but EOS banned by a finished grammar before
    min_new_tokens, extreme but valid penalties and temperatures."""
    cases = [
        {"regex": "ab", "min_new_tokens": 5, "max_new_tokens": 10},
        {"regex": "ab", "min_new_tokens": 5, "max_new_tokens": 10, "temperature": 100},
        {"repetition_penalty": 0.01, "max_new_tokens": 8, "min_new_tokens": 8},
        {"repetition_penalty": 100, "temperature": 1e-9, "max_new_tokens": 8},
        {"temperature": 100, "top_p": 1e-9, "min_p": 1.0, "max_new_tokens": 8},
        {"frequency_penalty": 2, "presence_penalty": -2, "top_k": 49152, "max_new_tokens": 8},
    ]
    for sp in cases:
        for extra in ({}, {"return_logprob": True, "top_logprobs_num": 3}):
            r = tiny_server.post("/generate", json={"text": "hi", "sampling_params": sp, **extra})
            assert r.status_code == 200, (sp, r.text)
            out = r.json()
            assert all(0 <= t < 49152 for t in out["output_ids"])
            if "regex" in sp:
                assert out["text"] == "ab" and out["meta_info"]["finish_reason"]["type"] == "stop"
    tiny_server.assert_serving()


# Characters whose UTF-8 holds a byte no token of SmolLM2's vocabulary holds (0xf1: planes 4-7;
# 0x04: a control byte): a grammar that needs one cannot be followed.
UNSPELLABLE = ["\U00040000", "x\U00050000", "\x04"]


@pytest.mark.parametrize("text", UNSPELLABLE)
def test_a_grammar_the_vocabulary_cannot_spell_gets_400(tiny_server, text: str) -> None:
    """A regex or schema whose text needs a byte no token holds: the request ends with a 400
    naming the vocabulary (not a 500), through each dialect, and the server goes on. (JSON
    writes a control character as an escape, so a schema's const of one is served.)"""
    bodies = [
        ("/generate", {"text": "0", "sampling_params": {"regex": text, "max_new_tokens": 8}}),
        ("/v1/completions", {"prompt": "0", "guided_regex": text, "max_tokens": 8}),
    ]
    if text.isprintable():
        schema = {"name": "x", "schema": {"type": "string", "const": text}}
        chat = {
            "messages": [{"role": "user", "content": "0"}],
            "max_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": schema},
        }
        bodies.append(("/v1/chat/completions", chat))
    for path, body in bodies:
        r = tiny_server.post(path, json=body)
        assert r.status_code == 400, (path, r.text)
        assert "vocabulary" in r.json()["error"]["message"], r.text
    tiny_server.assert_serving()


def test_bounds_on_the_work_of_one_request(tiny_server) -> None:
    chat = [{"role": "user", "content": "hi"}]
    cases = [
        ({"text": ["a"] * 9}, "--max-prompts-per-request"),
        ({"input_ids": [[5]] * 9}, "--max-prompts-per-request"),
        ({"text": "x" * 600_000}, "--max-prompt-chars"),
        (
            {"text": "hi", "sampling_params": {"stop": ["a", "b", "c", "d", "e"]}},
            "--max-stop-strings",
        ),
        ({"text": "hi", "sampling_params": {"stop": ["s" * 33]}}, "--max-stop-string-len"),
        ({"text": "hi", "sampling_params": {"regex": "a" * 5000}}, "--max-grammar-bytes"),
        ({"text": ["a", "b"], "sampling_params": {"n": 3}}, "--max-queued-requests"),
    ]
    for body, flag in cases:
        r = tiny_server.post("/generate", json=body)
        assert r.status_code == 400 and flag in r.json()["error"]["message"], (flag, r.text)
    r = tiny_server.post("/v1/chat/completions", json={"model": "m", "messages": chat * 17})
    assert r.status_code == 400 and "--max-chat-messages" in r.text
    r = tiny_server.post("/v1/completions", json={"model": "m", "prompt": ["a"] * 9})
    assert r.status_code == 400 and "--max-prompts-per-request" in r.text
    tiny_server.assert_serving()


def test_bodies_over_the_limit_get_413(tiny_server) -> None:
    big = b'{"text": "' + b"a" * 1_100_000 + b'"}'
    r = tiny_server.post("/generate", content=big, headers=JSON)
    assert r.status_code == 413 and "--max-request-bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted while read
        yield b'{"text": "'
        for _ in range(40):
            yield b"a" * 32768
        yield b'"}'

    r = tiny_server.post("/generate", content=chunks(), headers=JSON)
    assert r.status_code == 413, r.text
    tiny_server.assert_serving()


def test_health_stays_fast_while_prompts_are_tokenized(tiny_server) -> None:
    """Tokenizing runs off the event loop: /health answers in well under a second while
    prompts near the character bound are tokenized and refused."""
    latencies: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            assert tiny_server.get("/health").status_code == 200
            latencies.append(time.monotonic() - t0)
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for _ in range(4):  # ~40k characters: fits the character bound, not the context
            r = tiny_server.post("/generate", json={"text": "hello world " * 3400})
            assert r.status_code == 400 and "context length" in r.text
            r = tiny_server.post("/generate", json={"text": "x" * 900_000})
            assert r.status_code == 400
    finally:
        stop.set()
        poller.join()
    assert latencies and max(latencies) < 1.0, max(latencies)
    tiny_server.assert_serving()


def _long_stream(server, rid: str, auth: str, out: list) -> None:
    body = {
        "text": "Count:",
        "rid": rid,
        "stream": True,
        "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
    }
    with httpx.stream(
        "POST", server.url + "/generate", json=body, timeout=60, headers={"Authorization": auth}
    ) as r:
        out.append([line for line in r.iter_lines() if line.startswith("data: {")])


def _wait_running(server, num: int) -> None:
    deadline = time.monotonic() + 30
    while server.get("/get_server_info").json()["num_running_reqs"] < num:
        assert time.monotonic() < deadline, "request never started"
        time.sleep(0.02)


def test_abort_only_reaches_the_callers_own_requests(tiny_server) -> None:
    alice, bob = "Bearer alice", "Bearer bob"
    got: list = []
    thread = threading.Thread(target=_long_stream, args=(tiny_server, "job", alice, got))
    thread.start()
    _wait_running(tiny_server, 1)
    known = httpx.post(
        tiny_server.url + "/abort_request", json={"rid": "job"}, headers={"Authorization": bob}
    )
    unknown = httpx.post(
        tiny_server.url + "/abort_request",
        json={"rid": "nothing-here"},
        headers={"Authorization": bob},
    )
    assert known.status_code == unknown.status_code == 200
    assert known.json() == unknown.json()  # nothing tells bob that alice's "job" exists
    # bob may use the same name for a request of his own
    r = httpx.post(
        tiny_server.url + "/generate",
        headers={"Authorization": bob},
        json={**HI, "rid": "job"},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["meta_info"]["id"] == "job"
    thread.join(60)
    last = json.loads(got[0][-1].removeprefix("data: "))
    assert last["meta_info"]["finish_reason"]["type"] == "length"  # bob's abort missed it
    assert last["meta_info"]["completion_tokens"] == 400
    tiny_server.assert_serving()


def test_a_caller_aborts_its_own_request_by_the_id_it_was_given(tiny_server) -> None:
    """No rid given: the server makes one, tells it in meta_info.id, and aborts by it."""
    body = {
        "text": "Count:",
        "stream": True,
        "sampling_params": {"max_new_tokens": 500, "ignore_eos": True},
    }
    headers = {"Authorization": "Bearer carol"}
    with httpx.stream(
        "POST", tiny_server.url + "/generate", json=body, timeout=60, headers=headers
    ) as r:
        events = (
            json.loads(line.removeprefix("data: "))
            for line in r.iter_lines()
            if line.startswith("data: {")
        )
        rid = next(events)["meta_info"]["id"]
        assert len(rid) >= 32  # unguessable
        httpx.post(tiny_server.url + "/abort_request", json={"rid": rid}, headers=headers)
        last = list(events)[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert last["meta_info"]["completion_tokens"] < 500
    tiny_server.assert_serving()


def test_a_stream_whose_client_leaves_is_aborted(tiny_server) -> None:
    before = tiny_server.get("/get_server_info").json()["generated_tokens"]
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 400,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    with httpx.stream("POST", tiny_server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 4:
                break
    info = tiny_server.wait_idle_and_whole()
    assert info["generated_tokens"] - before < 400
    tiny_server.assert_serving()


def test_the_receive_loop_survives_bad_scheduler_messages(tiny_server) -> None:
    """Garbage and mistyped messages pushed into the HTTP process's output socket are dropped
    (logged); requests in flight and later ones are unaffected."""
    cmdline = Path(f"/proc/{tiny_server.scheduler_pid()}/cmdline").read_bytes().split(b"\0")
    out_addr = json.loads(cmdline[-2] if not cmdline[-1] else cmdline[-1])["out_addr"]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(out_addr)
    got: list = []
    thread = threading.Thread(target=_long_stream, args=(tiny_server, "loop", "Bearer c", got))
    thread.start()
    _wait_running(tiny_server, 1)
    try:
        enc = msgspec.msgpack.Encoder()
        for raw in [
            b"garbage",
            b"\x81\xa4type\xa5bogus",
            enc.encode({"type": "BatchTokenOutMsg"}),
            enc.encode(
                {
                    "type": "BatchTokenOutMsg",
                    "outputs": [[1, 2]],
                    "num_running": "x",
                    "num_waiting": 0,
                }
            ),
        ]:
            sock.send(raw)
    finally:
        sock.close(0)
        ctx.term()
    thread.join(60)
    last = json.loads(got[0][-1].removeprefix("data: "))
    assert last["meta_info"]["completion_tokens"] == 400
    assert "dropped an undecodable message" in tiny_server.log_path.read_text()
    tiny_server.assert_serving()
