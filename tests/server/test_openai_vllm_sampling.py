"""vLLM's sampling extras on the OpenAI routes (tiny-model server): allowed_token_ids (only
those ids are sampled, logprobs the model's own), truncate_prompt_tokens (each prompt its
last N tokens) and return_tokens_as_token_ids (logprobs name tokens "token_id:<id>")."""

from __future__ import annotations

from typing import Any

import pytest

PROMPT = "one two three four five six seven"
ASKED = [{"role": "user", "content": "Count from one to ten."}]


def _ok(server: Any, path: str, **body: Any) -> dict[str, Any]:
    r = server.post(path, json={"temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _ids(server: Any, text: str) -> list[int]:
    return server.post("/tokenize", json={"prompt": text}).json()["tokens"]


def test_allowed_token_ids_are_all_that_is_sampled(tiny_server) -> None:
    native = {"input_ids": _ids(tiny_server, PROMPT), "sampling_params": {"max_new_tokens": 8,
              "temperature": 0, "ignore_eos": True}}  # fmt: skip
    free = tiny_server.post("/generate", json=native).json()["output_ids"]
    allowed = sorted((set(free) | {7, 11}) - {free[0]})  # the first free token left out
    for temperature in (0, 1):
        got = _ok(tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=8, n=2,
                  temperature=temperature, ignore_eos=True, allowed_token_ids=allowed,
                  logprobs=1, return_tokens_as_token_ids=True)  # fmt: skip
        for choice in got["choices"]:
            ids = [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]
            assert len(ids) == 8 and set(ids) <= set(allowed), ids
    named = {"logprobs": True, "return_tokens_as_token_ids": True}
    chat = _ok(tiny_server, "/v1/chat/completions", messages=ASKED, max_tokens=6,
               allowed_token_ids=allowed, **named)  # fmt: skip
    ids = [
        int(e["token"].removeprefix("token_id:")) for e in chat["choices"][0]["logprobs"]["content"]
    ]
    assert ids and set(ids) <= set(allowed)
    # The native route takes it as a sampling parameter: the same greedy tokens.
    restricted = {
        **native,
        "sampling_params": {**native["sampling_params"], "allowed_token_ids": allowed},
    }
    out = tiny_server.post("/generate", json=restricted).json()["output_ids"]
    greedy = _ok(tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=8, ignore_eos=True,
                 allowed_token_ids=allowed, **{**named, "logprobs": 0})  # fmt: skip
    tokens = greedy["choices"][0]["logprobs"]["tokens"]
    assert out == [int(t.removeprefix("token_id:")) for t in tokens] and out[0] != free[0]
    tiny_server.assert_serving()


def test_tokens_as_ids_name_the_same_tokens_and_logprobs(tiny_server) -> None:
    body = {"prompt": PROMPT, "max_tokens": 5, "logprobs": 2}
    text = _ok(tiny_server, "/v1/completions", **body)["choices"][0]
    named = _ok(tiny_server, "/v1/completions", **body, return_tokens_as_token_ids=True)["choices"][
        0
    ]
    lp, lp_ids = text["logprobs"], named["logprobs"]
    assert lp_ids["token_logprobs"] == lp["token_logprobs"]
    assert lp_ids["text_offset"] == lp["text_offset"]  # offsets in the text either way
    decoded = [tiny_server.post("/detokenize", json={"tokens": [int(t[9:])]}).json()["prompt"]
               for t in lp_ids["tokens"]]  # fmt: skip
    assert decoded == lp["tokens"]
    assert all(all(k.startswith("token_id:") for k in top) for top in lp_ids["top_logprobs"])
    assert sorted(lp_ids["top_logprobs"][0].values()) == sorted(lp["top_logprobs"][0].values())


def test_truncate_prompt_tokens_keeps_the_last_tokens(tiny_server) -> None:
    ids = _ids(tiny_server, PROMPT)
    cut = _ok(tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=4, truncate_prompt_tokens=3,
              echo=True)  # fmt: skip
    tail = _ok(tiny_server, "/v1/completions", prompt=ids[-3:], max_tokens=4, echo=True)
    assert cut["usage"]["prompt_tokens"] == 3 and cut["choices"] == tail["choices"]
    whole = _ok(
        tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=4, truncate_prompt_tokens=-1
    )
    assert whole["usage"]["prompt_tokens"] == len(ids)
    chat = _ok(tiny_server, "/v1/chat/completions", messages=ASKED, max_tokens=4,
               truncate_prompt_tokens=5)  # fmt: skip
    assert chat["usage"]["prompt_tokens"] == 5


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens must be -1 or >= 1, got 0"),
        ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens must be -1 or >= 1"),
        ({"allowed_token_ids": [10**7]}, "allowed_token_ids: token id 10000000 is outside"),
        ({"allowed_token_ids": [-1]}, "allowed_token_ids"),
        ({"allowed_token_ids": ["a"]}, "invalid request"),
        ({"allowed_token_ids": [1], "regex": "[ab]+"}, "allowed_token_ids cannot be combined"),
        ({"return_tokens_as_token_ids": "yes"}, "invalid request"),
        ({"allowed_token_ids": []}, "an empty list allows no token"),
    ],
)  # fmt: skip
def test_bad_values_get_400(tiny_server, body, fragment) -> None:
    for path, base in (
        ("/v1/completions", {"prompt": PROMPT}),
        ("/v1/chat/completions", {"messages": ASKED}),
    ):
        r = tiny_server.post(path, json={**base, "max_tokens": 2, **body})
        assert r.status_code == 400, (path, r.text)
        assert fragment in r.json()["error"]["message"], (path, r.text)
    tiny_server.assert_serving()


def test_prompt_logprobs_score_every_prompt_token_with_its_rank(tiny_server) -> None:
    ids = _ids(tiny_server, PROMPT)
    native = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
              "return_logprob": True, "logprob_start_len": 0}  # fmt: skip
    want = [lp for lp, _, _ in tiny_server.post("/generate", json=native).json()["meta_info"][
        "input_token_logprobs"]]  # fmt: skip
    got = _ok(tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=2, n=2, prompt_logprobs=20)
    for choice in got["choices"]:
        entries = choice["prompt_logprobs"]
        assert choice["logprobs"] is None  # only what was asked is shown
        assert len(entries) == len(ids) and entries[0] is None
        for i, entry in enumerate(entries[1:], 1):
            own = entry[str(ids[i])]
            assert own["logprob"] == pytest.approx(want[i], abs=1e-4)
            alts = sorted(entry.values(), key=lambda e: -e["logprob"])
            higher = [e for e in alts if e["logprob"] > own["logprob"]]
            if own["rank"] <= 20:  # among the 20 shown: ranked by its place
                assert own["rank"] == len(higher) + 1
            else:
                assert len(entry) == 21 and len(higher) == 20
            others = sorted(e["rank"] for e in entry.values() if e is not own)
            assert others == [r for r in range(1, 21) if r != own["rank"]]  # the 20 likeliest
    # One alternative each, the output's logprobs with their own count, ids as names; chat
    # has them on the response (one prompt).
    both = _ok(tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=2, prompt_logprobs=1,
               logprobs=3, return_tokens_as_token_ids=True)["choices"][0]  # fmt: skip
    assert all(len(e) <= 2 for e in both["prompt_logprobs"][1:])
    assert all(len(t) == 3 for t in both["logprobs"]["top_logprobs"])
    entry = both["prompt_logprobs"][1][str(ids[1])]
    assert entry["decoded_token"] == f"token_id:{ids[1]}"
    chat = _ok(tiny_server, "/v1/chat/completions", messages=ASKED, max_tokens=2, prompt_logprobs=0)
    counted = tiny_server.post("/tokenize", json={"messages": ASKED}).json()["tokens"]
    assert len(chat["prompt_logprobs"]) == len(counted) and chat["prompt_logprobs"][0] is None
    assert [list(e) for e in chat["prompt_logprobs"][1:]] == [[str(t)] for t in counted[1:]]
    r = tiny_server.post("/v1/completions", json={"prompt": PROMPT, "prompt_logprobs": 1,
                                                   "stream": True})  # fmt: skip
    assert r.status_code == 400 and "prompt_logprobs needs stream false" in r.text
    r = tiny_server.post("/v1/completions", json={"prompt": PROMPT, "prompt_logprobs": 21})
    assert r.status_code == 400 and "prompt_logprobs must be in [0, 20]" in r.text


def test_allowed_ids_with_tools_parse_calls_without_a_grammar(tiny_server) -> None:
    """`auto` tools would constrain an opened call by a grammar, whose forced tokens are not
    sampled: with allowed_token_ids the calls are only parsed; a forced call is a 400."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    allowed = _ids(tiny_server, " one two three")
    named = {"logprobs": True, "return_tokens_as_token_ids": True}
    got = _ok(tiny_server, "/v1/chat/completions", messages=ASKED, tools=tools, max_tokens=6,
              allowed_token_ids=allowed, **named)  # fmt: skip
    content = got["choices"][0]["logprobs"]["content"]
    assert content and {int(e["token"][9:]) for e in content} <= set(allowed)
    r = tiny_server.post("/v1/chat/completions", json={"messages": ASKED, "tools": tools,
                         "tool_choice": "required", "allowed_token_ids": allowed})  # fmt: skip
    assert r.status_code == 400
    assert "a forced tool call cannot be combined with allowed_token_ids" in r.text


def test_echo_of_a_prompt_not_cut_is_the_prompt_as_sent(tiny_server) -> None:
    n = len(_ids(tiny_server, PROMPT))
    for keep in (n, n + 50, -1):
        got = _ok(tiny_server, "/v1/completions", prompt=PROMPT, max_tokens=1, echo=True,
                  truncate_prompt_tokens=keep)  # fmt: skip
        assert got["choices"][0]["text"].startswith(PROMPT), keep
