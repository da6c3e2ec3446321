"""Property tests: random JSON values in every field of /generate and the OpenAI bodies, and a
schema-driven fuzz of the published OpenAPI document. The server must answer 2xx, or 4xx with
a message; never 5xx, never die; the pool is whole afterwards."""

from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from radixrt.core import SamplingParams

SAMPLING_FIELDS = [*SamplingParams.__struct_fields__, "max_tokens", "min_tokens"]
HOSTILE_NUMBERS = [
    10**23,
    -(10**23),
    2**63,
    2**63 - 1,
    -(2**63),
    2**64,
    1e308,
    -1e308,
    1e-320,
    3e38,
    -1,
    0,
    49152,
    49151,
    511,
    512,
    10**6,
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(HOSTILE_NUMBERS)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)

# Plausible values, so bodies get past the first check often enough to reach the scheduler.
PLAUSIBLE = {
    "max_new_tokens": st.integers(0, 6),
    "max_tokens": st.integers(0, 6),
    "min_new_tokens": st.integers(0, 6),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "top_k": st.integers(-1, 60000),
    "min_p": st.floats(0, 1),
    "repetition_penalty": st.floats(0.01, 3),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "stop": st.lists(st.text(min_size=1, max_size=4), max_size=5),
    "stop_token_ids": st.lists(st.integers(0, 49151), max_size=3),
    "n": st.integers(1, 3),
    "top_logprobs_num": st.integers(0, 5),
    "logprob_start_len": st.integers(-1, 3),
    "return_logprob": st.booleans(),
    "regex": st.sampled_from(["[a-z]+", "(yes|no)", "a{2,3}", "(", "[z-a]", "\\d{1,3}"]),
    "json_schema": st.sampled_from([{"type": "object"}, {"type": "integer"}, {"type": 5}, "{"]),
    "ebnf": st.sampled_from(['start: "x"', "start: ", "start: start"]),
    "logit_bias": st.dictionaries(
        st.one_of(st.integers(-3, 49160).map(str), st.text(max_size=4)),
        st.one_of(st.floats(-150, 150), st.sampled_from([-100, 100, 1e308])),
        max_size=4,
    ),
}


def value(name: str) -> st.SearchStrategy:
    plausible = PLAUSIBLE.get(name)
    return ANY_JSON if plausible is None else st.one_of(plausible, plausible, ANY_JSON)


SAMPLING = st.fixed_dictionaries(
    {"max_new_tokens": st.one_of(st.integers(0, 6), ANY_JSON)},
    optional={k: value(k) for k in SAMPLING_FIELDS if k != "max_new_tokens"},
)
PROMPT = st.one_of(st.text(min_size=1, max_size=40), ANY_JSON)
GENERATE = st.fixed_dictionaries(
    {"text": PROMPT, "sampling_params": st.one_of(SAMPLING, ANY_JSON)},
    optional={
        "input_ids": ANY_JSON,
        "stream": value("stream"),
        "return_logprob": value("return_logprob"),
        "logprob_start_len": value("logprob_start_len"),
        "top_logprobs_num": value("top_logprobs_num"),
        "rid": ANY_JSON,
        "extra_key": ANY_JSON,
    },
)
OPENAI_FIELDS = [
    "temperature",
    "top_p",
    "n",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "stream",
    "stream_options",
    "model",
    "rid",
]
COMMON = {k: value(k) for k in OPENAI_FIELDS}
COMPLETION = st.fixed_dictionaries(
    {"prompt": PROMPT, "max_tokens": st.one_of(st.integers(0, 6), ANY_JSON)},
    optional={**COMMON, "logprobs": ANY_JSON, "echo": ANY_JSON, "best_of": ANY_JSON},
)
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.one_of(st.sampled_from(["user", "system", "assistant"]), ANY_JSON),
        "content": st.one_of(st.text(max_size=20), ANY_JSON),
    }
)
CHAT = st.fixed_dictionaries(
    {
        "messages": st.one_of(st.lists(MESSAGE, min_size=1, max_size=3), ANY_JSON),
        "max_tokens": st.one_of(st.integers(0, 6), ANY_JSON),
    },
    optional={
        **COMMON,
        "logprobs": ANY_JSON,
        "top_logprobs": ANY_JSON,
        "rid": ANY_JSON,
        "response_format": ANY_JSON,
        "max_completion_tokens": ANY_JSON,
    },
)


def check_answer(r: httpx.Response, is_stream: bool) -> None:
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        message = r.json()["error"]["message"]
        assert isinstance(message, str) and message, r.text
    elif is_stream:
        for line in r.text.splitlines():
            if line.startswith("data: {"):
                event = json.loads(line.removeprefix("data: "))
                assert event.get("error", {}).get("code", 0) < 500, event


FUZZ = settings(
    max_examples=70,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.mark.parametrize(
    ("path", "bodies"),
    [("/generate", GENERATE), ("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)],
)
def test_random_values_in_every_field(tiny_server, path: str, bodies) -> None:
    @FUZZ
    @given(body=bodies)
    def run(body: dict) -> None:
        r = tiny_server.post(path, json=body, timeout=60)
        check_answer(r, body.get("stream") is True)

    run()
    tiny_server.assert_serving()


def test_openapi_schema_fuzz(tiny_server) -> None:
    """Bodies generated from /openapi.json, valid and invalid (schemathesis), at every POST
    operation it describes."""
    doc = tiny_server.get("/openapi.json").json()
    for path in ("/generate", "/v1/completions", "/v1/chat/completions", "/abort_request"):
        assert "requestBody" in doc["paths"][path]["post"], path
    api = schemathesis.openapi.from_dict(doc)
    operations = [op.ok() for op in api.get_all_operations()]
    posts = [op for op in operations if op.method.upper() == "POST"]
    assert len(posts) >= 5, [op.path for op in posts]
    for op in posts:
        has_body = "requestBody" in doc["paths"][op.path]["post"]
        modes = [GenerationMode.POSITIVE] + [GenerationMode.NEGATIVE] * has_body
        for mode in modes:  # nothing to get wrong in a POST without a body
            _fuzz_operation(tiny_server, op, mode)
    tiny_server.assert_serving()


def _fuzz_operation(server, op, mode: GenerationMode) -> None:
    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case) -> None:
        body = case.body if isinstance(case.body, (dict, list)) else None
        r = server.post(op.path, json=body, timeout=60)
        assert r.status_code < 500, (op.path, case.body, r.text)

    run()


def test_server_whole_after_the_fuzz(tiny_server) -> None:
    tiny_server.assert_serving()
