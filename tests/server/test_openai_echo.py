"""`echo` on /v1/completions (the tiny-model server): each choice's text opens with its prompt,
and with `logprobs` its prompt tokens come first in `logprobs` (the first without a logprob),
as evaluation harnesses score a continuation (prompt ids, echo, logprobs, max_tokens 0 or 1);
streamed, the prompt is each choice's first chunk; n > 1 and lists of prompts; a 400 for
streamed echo with logprobs."""

from __future__ import annotations

import json
from typing import Any

import pytest

PROMPT = "one two three four one two three four one two"


def _complete(server: Any, **body: Any) -> dict[str, Any]:
    r = server.post("/v1/completions", json={"max_tokens": 6, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_echo_repeats_the_prompt(tiny_server) -> None:
    plain = _complete(tiny_server, prompt=PROMPT)["choices"][0]["text"]
    echoed = _complete(tiny_server, prompt=PROMPT, echo=True)
    assert echoed["choices"][0]["text"] == PROMPT + plain
    assert (
        _complete(tiny_server, prompt=PROMPT, echo=True, max_tokens=0)["choices"][0]["text"]
        == PROMPT
    )
    two = _complete(tiny_server, prompt=[PROMPT, "five six"], echo=True, n=2, max_tokens=3)
    texts = [c["text"] for c in sorted(two["choices"], key=lambda c: c["index"])]
    assert [t.startswith(PROMPT) for t in texts] == [True, True, False, False]
    assert texts[2].startswith("five six") and texts[3].startswith("five six")


def test_echo_with_logprobs_scores_the_prompt(tiny_server) -> None:
    native = tiny_server.post(
        "/generate",
        json={"text": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 0},
              "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2},
    ).json()  # fmt: skip
    meta = native["meta_info"]
    prompt_ids = [t for _, t, _ in meta["input_token_logprobs"]]
    plain = _complete(tiny_server, prompt=PROMPT, logprobs=2)["choices"][0]["logprobs"]
    for _ in range(2):  # the second with the prompt cached: its logprobs computed again
        lp = _complete(tiny_server, prompt=PROMPT, logprobs=2, echo=True)["choices"][0]["logprobs"]
        n = len(prompt_ids)
        assert len(lp["tokens"]) == n + 6 and lp["tokens"][n:] == plain["tokens"]
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        want = [x for x, _, _ in meta["input_token_logprobs"]][1:]
        assert lp["token_logprobs"][1:n] == pytest.approx(want, abs=1e-4)
        assert lp["token_logprobs"][n:] == pytest.approx(plain["token_logprobs"], abs=1e-4)
        assert all(len(top) == 2 for top in lp["top_logprobs"][1:])
        offsets = lp["text_offset"]
        assert offsets[0] == 0 and offsets == sorted(offsets)
        assert "".join(lp["tokens"][:n]) == PROMPT
    # n > 1: every sample repeats the prompt's scores (computed once, by the first)
    two = _complete(tiny_server, prompt=PROMPT, logprobs=1, echo=True, n=2, temperature=1.0)
    for choice in two["choices"]:
        lp = choice["logprobs"]
        assert lp["token_logprobs"][1:n] == pytest.approx(want, abs=1e-4)
        assert len(lp["tokens"]) == n + 6 and choice["text"].startswith(PROMPT)


def test_scoring_a_continuation_as_evaluation_harnesses_do(tiny_server) -> None:
    """Prompt ids + a continuation, echo, logprobs 1, max_tokens 1: the continuation's
    logprobs sum to the native score, and it is greedy exactly where the model picks it."""
    native = tiny_server.post(
        "/generate",
        json={"text": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0},
              "return_logprob": True, "logprob_start_len": 0},
    ).json()  # fmt: skip
    ctx = [t for _, t, _ in native["meta_info"]["input_token_logprobs"]]
    greedy = native["output_ids"]
    for cont, is_greedy in ((greedy, True), ([greedy[1], greedy[0], 7, 7], False)):
        r = _complete(tiny_server, prompt=ctx + cont, echo=True, logprobs=1, max_tokens=1)
        lp = r["choices"][0]["logprobs"]
        scored = lp["token_logprobs"][len(ctx) : -1]
        assert len(scored) == len(cont)
        tops = lp["top_logprobs"][len(ctx) : -1]
        assert all(t == pytest.approx(max(top.values()), abs=1e-5) for t, top in
                   zip(scored, tops)) is is_greedy  # fmt: skip
    outs = [(lp, t) for lp, t, _ in native["meta_info"]["output_token_logprobs"]]
    r = _complete(tiny_server, prompt=ctx + greedy, echo=True, logprobs=0, max_tokens=0)
    lp = r["choices"][0]["logprobs"]
    assert lp["token_logprobs"][len(ctx) :] == pytest.approx([x for x, _ in outs], abs=1e-4)
    assert lp["top_logprobs"] is None


def test_streamed_echo(tiny_server) -> None:
    whole = _complete(tiny_server, prompt=PROMPT, n=2, echo=True)
    r = tiny_server.post(
        "/v1/completions",
        json={"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "n": 2, "echo": True,
              "stream": True},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    texts: dict[int, list[str]] = {0: [], 1: []}
    for line in r.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:])["choices"]:
                texts[choice["index"]].append(choice["text"])
    for i in (0, 1):
        assert texts[i][0] == PROMPT
        assert "".join(texts[i]) == whole["choices"][i]["text"]
    r = tiny_server.post(
        "/v1/completions",
        json={"prompt": PROMPT, "max_tokens": 2, "echo": True, "logprobs": 1, "stream": True},
    )
    assert r.status_code == 400 and "echo with logprobs needs stream false" in r.text
    r = tiny_server.post("/v1/completions", json={"prompt": PROMPT, "suffix": "x"})
    assert r.status_code == 400 and "suffix and best_of are not supported" in r.text
    tiny_server.assert_serving()
