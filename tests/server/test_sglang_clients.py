"""SGLang's clients against a real SmolLM2 server: the /generate bodies its frontend language
(`RuntimeEndpoint`) and its `bench_serving` send, with their meaning (stop_regex,
no_stop_trim, return_text_in_logprobs, the decode flags), their control calls, and, where the
`sglang` package is installed (`pip install --no-deps sglang orjson pybase64`: its full
dependencies are CUDA wheels), README-style programs run by SGLang's own interpreter."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

PROMPT = "USER: Name three colors, separated by commas.\nASSISTANT:"


def _frontend_params(**over: Any) -> dict[str, Any]:
    """The sampling_params RuntimeEndpoint.generate sends for a plain `gen` (the shape of
    SglSamplingParams.to_srt_kwargs plus the two decode flags of its global config)."""
    return {
        "skip_special_tokens": True,
        "spaces_between_special_tokens": True,
        "max_new_tokens": 16,
        "min_new_tokens": 0,
        "n": 1,
        "stop": [],
        "stop_token_ids": [],
        "stop_regex": [],
        "temperature": 0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "ignore_eos": False,
        "regex": None,
        "json_schema": None,
        **over,
    }


def _generate(server: Any, body: dict[str, Any]) -> Any:
    r = server.post("/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _events(server: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = server.post("/generate", json={**body, "stream": True}, timeout=120)
    assert r.status_code == 200, r.text
    lines = [ln[5:].strip() for ln in r.text.splitlines() if ln.startswith("data:")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_the_frontend_gen_body_runs_and_streams_the_same(api_server) -> None:
    body = {"text": PROMPT, "sampling_params": _frontend_params()}
    out = _generate(api_server, body)
    assert out["text"] and out["meta_info"]["completion_tokens"] > 0
    events = _events(api_server, body)
    assert events[-1]["text"] == out["text"]
    model = api_server.get("/get_model_info").json()
    assert model["model_path"]  # what RuntimeEndpoint reads at connect time


def test_stop_regex_stops_and_cuts_unless_no_stop_trim(api_server) -> None:
    free = _generate(api_server, {"text": PROMPT, "sampling_params": _frontend_params()})
    text = free["text"]
    regex = r"[:,;]\s"  # the model's first list punctuation and the space after it
    first = re.search(regex, text)
    assert first is not None, text
    head, matched = text[: first.start()], first.group()
    body = {"text": PROMPT, "sampling_params": _frontend_params(stop_regex=regex)}
    out = _generate(api_server, body)
    assert out["text"] == head
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": matched}
    assert out["meta_info"]["completion_tokens"] < free["meta_info"]["completion_tokens"]
    assert "".join(e["text"] for e in _events(api_server, body)[-1:]) == head
    kept = {
        "text": PROMPT,
        "sampling_params": _frontend_params(stop_regex=[regex], no_stop_trim=True),
    }
    assert _generate(api_server, kept)["text"].startswith(head + matched)
    stop = {"text": PROMPT, "sampling_params": _frontend_params(stop=matched, no_stop_trim=True)}
    assert _generate(api_server, stop)["text"].startswith(head + matched)


def test_select_logprob_entries_carry_token_text(api_server) -> None:
    """The second request of RuntimeEndpoint.select: each choice appended, no new token, the
    prompt's logprobs from two tokens before the choice, with their text."""
    first = _generate(api_server, {"text": PROMPT, "sampling_params": {"max_new_tokens": 0}})
    start = max(first["meta_info"]["prompt_tokens"] - 2, 0)
    body = {
        "text": [PROMPT + c for c in (" red", " blue")],
        "sampling_params": {"max_new_tokens": 0, "temperature": 0},
        "return_logprob": True,
        "return_text_in_logprobs": True,
        "logprob_start_len": start,
    }
    outs = _generate(api_server, body)
    for out, choice in zip(outs, (" red", " blue"), strict=True):
        entries = out["meta_info"]["input_token_logprobs"]
        assert all(isinstance(t, str) for _, _, t in entries)
        assert "".join(t for _, _, t in entries).endswith(choice)
        assert out["meta_info"]["output_token_logprobs"] == []
    plain = _generate(api_server, {**body, "return_text_in_logprobs": False})
    assert all(t is None for _, _, t in plain[0]["meta_info"]["input_token_logprobs"])


def test_the_bench_serving_body_streams_its_tokens(api_server) -> None:
    body = {
        "text": "The history of the city",
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True},
        "stream": True,
        "lora_path": None,
        "return_logprob": False,
        "return_routed_experts": False,
        "logprob_start_len": -1,
    }
    events = _events(api_server, body)
    assert events[-1]["meta_info"]["completion_tokens"] == 6 and events[-1]["text"]
    r = api_server.post("/flush_cache", params={"timeout": 5}, json={"empty_cache": True})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"bogus": 1}, "bogus"),
        ({"lora_path": "adapter-1"}, "lora_path"),
        ({"return_routed_experts": True}, "return_routed_experts"),
        ({"image_data": "data:image/png;base64,AAAA"}, "image_data"),
        ({"sampling_params": {"stop_regex": "("}}, "not a valid regex"),
        ({"sampling_params": {"stop_regex": ["^a"]}}, "anchors"),
        ({"sampling_params": {"stop_regex": "x*"}}, "empty string"),
        ({"sampling_params": {"stop_regex": ["a{2000}"]}}, "too complex"),
        ({"sampling_params": {"spaces_between_special_tokens": "yes"}}, "spaces_between"),
    ],
)
def test_what_radixrt_does_not_serve_is_a_400(api_server, extra, why) -> None:
    r = api_server.post("/generate", json={"text": "hi", **extra}, timeout=60)
    assert r.status_code == 400 and why in r.text, r.text


def test_flush_timeout_must_be_seconds(api_server) -> None:
    r = api_server.post("/flush_cache", params={"timeout": "soon"})
    assert r.status_code == 400 and "timeout" in r.text


def test_sglang_programs_run_unchanged_but_for_the_url(api_server) -> None:
    """README-style programs of SGLang's frontend language through its RuntimeEndpoint."""
    sgl = pytest.importorskip("sglang")

    @sgl.function
    def multi_turn(s, first, second):  # type: ignore[no-untyped-def]
        s += sgl.system("You answer in a few words.")
        s += sgl.user(first)
        s += sgl.assistant(sgl.gen("a1", max_tokens=12, temperature=0))
        s += sgl.user(second)
        s += sgl.assistant(sgl.gen("a2", max_tokens=12, temperature=0, stop_regex=r"\.\s"))

    @sgl.function
    def tips(s, topic):  # type: ignore[no-untyped-def]
        s += f"Here are two tips about {topic}.\n"
        forks = s.fork(2)
        for i, f in enumerate(forks):
            f += f"Tip {i + 1}:" + sgl.gen("tip", max_tokens=10, temperature=0, stop="\n")
        s += "Summary:" + sgl.gen("summary", max_tokens=8, temperature=0)

    @sgl.function
    def choose(s, question):  # type: ignore[no-untyped-def]
        s += question + " Answer yes or no: "
        s += sgl.select("answer", choices=["yes", "no"])

    @sgl.function
    def structured(s):  # type: ignore[no-untyped-def]
        s += "The year the first moon landing happened: "
        s += sgl.gen("year", max_tokens=8, regex=r"19[0-9]{2}")
        s += "\nA city as JSON: "
        schema = json.dumps(
            {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 12}},
                "required": ["name"],
            }  # fmt: skip
        )
        s += sgl.gen("city", max_tokens=24, json_schema=schema)
        s += "\nA small number: " + sgl.gen_int("n", max_tokens=4)

    backend = sgl.RuntimeEndpoint(api_server.url)
    sgl.set_default_backend(backend)
    state = multi_turn.run(first="What is the capital of France?", second="And of Italy?")
    assert state["a1"] and state["a2"] is not None and ". " not in state["a2"]
    assert "USER:" in state.text() and state.messages()[-1]["role"] == "assistant"
    state = tips.run(topic="sleep")
    assert state["summary"] is not None
    state = choose.run(question="Is the sky blue?")
    assert state["answer"] in ("yes", "no")
    state = structured.run()
    assert re.fullmatch(r"19[0-9]{2}", state["year"])
    assert isinstance(json.loads(state["city"])["name"], str)
    assert isinstance(state["n"], str) and state["n"].strip().lstrip("+-").isdigit()
    states = choose.run_batch([{"question": "Is fire cold?"}, {"question": "Is ice cold?"}])
    assert all(st["answer"] in ("yes", "no") for st in states)
    sgl.flush_cache()
