"""Programs on SmolLM2, each run on the in-process Engine and on the HTTP server."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
from radixrt_lang.backends import as_backend

import radixrt as rt

FEW_SHOT = (
    "Q: What is the capital of Italy?\nA: Rome\nQ: What is the capital of Germany?\nA: Berlin\n"
)


@rt.function
def few_shot(s, question):
    s += FEW_SHOT
    s += "Q: " + question + "\nA:"
    s += rt.gen("answer", max_tokens=8, stop="\n")


@rt.function
def chat(s, first, second):
    s += rt.system("You are a concise assistant.")
    s += rt.user(first)
    s += rt.assistant(rt.gen("a1", max_tokens=12))
    with s.user():
        s += second
    with s.assistant():
        s += rt.gen("a2", max_tokens=12)


@rt.function
def classify(s, review):
    s += (
        "Review: The food was awful and cold.\nSentiment: negative\n"
        "Review: A wonderful evening, great service.\nSentiment: positive\n"
    )
    s += "Review: " + review + "\nSentiment: "
    s += rt.select("label", ["positive", "negative"])


def test_few_shot_qa(backend) -> None:
    s = few_shot.run(question="What is the capital of France?", backend=backend, temperature=0)
    assert s["answer"].strip() == "Paris"
    meta = s.get_meta_info("answer")
    assert meta["finish_reason"]["type"] in ("stop", "length") and meta["completion_tokens"] >= 1


def test_multi_turn_roles_use_the_models_template(backend, tokenizer) -> None:
    s = chat.run(
        first="What is the capital of France?",
        second="And of Spain?",
        backend=backend,
        temperature=0,
    )
    msgs = s.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == s["a1"] and msgs[4]["content"] == s["a2"]
    assert s.text() == tokenizer.apply_chat_template(msgs, tokenize=False)
    assert "Paris" in s["a1"]
    # the second turn's prompt is the first turn plus a few tokens: a cache hit
    first, second = s.get_meta_info("a1"), s.get_meta_info("a2")
    assert second["cached_tokens"] >= first["prompt_tokens"]


def test_select_classifies(backend) -> None:
    pos = classify.run(review="I loved it, the best meal of my life!", backend=backend)
    neg = classify.run(review="Terrible. Rude staff and the soup was cold.", backend=backend)
    assert (pos["label"], neg["label"]) == ("positive", "negative")
    meta = pos.get_meta_info("label")
    assert meta["choices"] == ["positive", "negative"]
    assert [len(t) for t in meta["input_token_logprobs"]] == [1, 1]  # one token each
    assert all(lp <= 0 for lp in meta["normalized_prompt_logprobs"])
    # the prompt was cached by the first call; the batched choices call reused most of it
    assert min(meta["choices_cached_tokens"]) >= meta["prompt_tokens"] - 5
    for method in ("greedy_token_selection", "unconditional_likelihood_normalized"):
        s = rt.function(
            lambda s, m=method: s.__iadd__(
                FEW_SHOT
                + "Q: What is the capital of France?\nA: "
                + rt.select("c", ["Paris", "London", "Tokyo"], choices_method=m)
            )
        ).run(backend=backend)
        assert s["c"] == "Paris", method


def test_typed_gens(backend) -> None:
    @rt.function
    def typed(s):
        s += "2 + 3 = 5\n4 + 4 = 8\n6 + 1 = " + rt.gen_int("n") + "\n"
        s += "Half of 5 is 2.5\nHalf of 3 is 1.5\nHalf of 7 is " + rt.gen("half", dtype=float)
        s += "\n"
        s += "Is the sky blue? Answer True or False: " + rt.gen("blue", dtype=bool) + "\n"
        s += "The number of hours in a day is " + rt.gen_int("hours") + ".\n"

    s = typed.run(backend=backend, temperature=0)
    assert s["n"] == 7 and isinstance(s["n"], int)
    if as_backend(backend).supports_regex:  # the value ends where the model's sentence goes on
        assert s["hours"] == 24
    assert isinstance(s["half"], float)
    assert math.isfinite(s["half"]) and f"Half of 7 is {s['half']}" in s.text()
    assert s["blue"] is True
    assert "6 + 1 = 7\n" in s.text()


def test_regex(backend) -> None:
    if not as_backend(backend).supports_regex:
        pytest.skip("structured generation has not landed: the backend does not enforce regex")
    s = rt.function(lambda s: s.__iadd__("Code: " + rt.gen("code", regex="[A-Z]{3}-[0-9]{2}")))
    out = s.run(backend=backend, temperature=0)
    assert len(out["code"]) == 6 and out["code"][3] == "-"


def test_json_extraction_example(backend) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    path = Path(__file__).resolve().parents[2] / "examples" / "json_extraction.py"
    spec = importlib.util.spec_from_file_location("json_extraction", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    states = example.extract_city.run_batch(
        [{"passage": p} for p in example.PASSAGES[:2]], backend=backend, temperature=0
    )
    for state in states:
        assert state.error() is None, state.error()
        jsonschema.validate(state["record"], example.CITY_SCHEMA)
    assert states[0]["record"]["name"] == "Lyon"


def test_json_schema_and_regex_gens_at_temperature_one(backend) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    person = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "age"],
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 99},
        },
    }

    @rt.function
    def profile(s, who):
        s += f"A {who} as JSON: " + rt.gen("person", json_schema=person, max_tokens=48)
        s += "\nPhone: " + rt.gen("phone", regex=r"[0-9]{3}-[0-9]{4}", max_tokens=12)

    states = profile.run_batch(
        [{"who": w, "seed": i} for i, w in enumerate(["teacher", "pilot", "child"])],
        backend=backend,
        temperature=1.0,
    )
    for state in states:
        assert state.error() is None, state.error()
        jsonschema.validate(json.loads(state["person"]), person)
        assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", state["phone"])


def test_fork_join_hits_the_cache(backend, tokenizer) -> None:
    prefix = "Here are three short ideas for a weekend trip to the mountains.\n"

    @rt.function
    def branches(s):
        s += prefix
        forks = s.fork(3)
        forks += lambda i: f"Idea {i + 1}:" + rt.gen("idea", max_tokens=6, stop="\n")
        forks.join()
        s += "Chosen: " + rt.select("best", ["1", "2", "3"])

    s = branches.run(backend=backend, temperature=0.7, seed=1)
    assert len(s["idea"]) == 3 and all(isinstance(x, str) for x in s["idea"])
    metas = s.get_meta_info("idea")
    # fork() cached the shared prefix, so every branch's first request hits all of it
    assert all(m["cached_tokens"] >= len(tokenizer.encode(prefix)) for m in metas)
    assert s["best"] in ("1", "2", "3")


def test_run_batch_keeps_order_and_hits_the_prefix(backend, tokenizer) -> None:
    @rt.function
    def echo(s, word):
        s += rt.system("Repeat the user's word exactly, in lowercase. Answer with one word only.")
        s += rt.user(word)
        s += rt.assistant(rt.gen("out", max_tokens=4))

    words = ["apple", "river", "stone", "cloud", "tiger", "music"]
    prefix = echo.cache_prefix(backend)
    assert prefix.endswith("<|im_start|>user\n")
    states = echo.run_batch(
        [{"word": w} for w in words], backend=backend, temperature=0, num_threads=3
    )
    n_prefix = len(tokenizer.encode(prefix))
    for w, s in zip(words, states):
        assert s.error() is None
        assert s.messages()[1]["content"] == w
        assert s.get_meta_info("out")["cached_tokens"] >= n_prefix - 1


def test_streaming(backend) -> None:
    story = rt.function(
        lambda s: s.__iadd__("Once upon a time" + rt.gen("story", max_tokens=8, ignore_eos=True))
    )
    s = story.run(backend=backend, temperature=0, stream=True)
    pieces = list(s.text_iter("story"))
    assert len(pieces) >= 2 and "".join(pieces) == s["story"]
    whole = story.run(backend=backend, temperature=0, stream=True)
    assert "".join(whole.text_iter()) == whole.text() == "Once upon a time" + whole["story"]


def test_asyncio(backend) -> None:
    @rt.function
    async def two_step(s, question):
        s += FEW_SHOT + "Q: " + question + "\nA:" + rt.gen("answer", max_tokens=8, stop="\n")
        answer = await s.aget("answer")
        s += f"\nQ: How many letters are in{answer}?\nA:" + rt.gen_int("letters")

    async def main():
        one = await two_step.arun(
            question="What is the capital of France?", backend=backend, temperature=0
        )
        batch = await few_shot.arun_batch(
            [{"question": f"What is the capital of {c}?"} for c in ("France", "Spain", "Japan")],
            backend=backend,
            temperature=0,
        )
        return one, batch

    one, batch = asyncio.run(main())
    assert one["answer"].strip() == "Paris" and isinstance(one["letters"], int)
    assert [s.text().rsplit("Q: ", 1)[1].split("?")[0] for s in batch] == [
        f"What is the capital of {c}" for c in ("France", "Spain", "Japan")
    ]
    assert batch[0]["answer"] == one["answer"]


def test_tool_use_loop_calls_python_between_gens(backend) -> None:
    calls = []

    def calculator(expr: str) -> str:
        calls.append(expr)
        allowed = set("0123456789+-*/(). ")
        return str(eval(expr)) if expr and set(expr) <= allowed else "error"  # noqa: S307

    @rt.function
    def agent(s, task):
        s += (
            "Use the calculator to compute things.\n"
            "Task: add 2 and 2\nAction: calculator\nInput: 2 + 2\nObservation: 4\n"
            "Action: finish\nAnswer: 4\n\n"
        )
        s += f"Task: {task}\n"
        for _ in range(3):
            s += "Action: " + rt.select("action", ["calculator", "finish"]) + "\n"
            if s["action"] == "finish":
                s += "Answer: " + rt.gen("answer", max_tokens=6, stop="\n")
                return
            s += "Input: " + rt.gen("input", max_tokens=10, stop="\n") + "\n"
            s += "Observation: " + calculator(s["input"].strip()) + "\n"

    s = agent.run(task="multiply 6 by 7", backend=backend, temperature=0)
    assert calls, "the agent never called the tool"
    assert f"Observation: {calculator(calls[0].strip()) if calls else ''}" in s.text()


def test_errors_name_the_primitive(backend) -> None:
    with pytest.raises(rt.ProgramError, match=r"gen\('answer'\) failed: .*temperature"):
        few_shot.run(question="Hi?", backend=backend, temperature=-1)
    states = few_shot.run_batch(
        [
            {"question": "Capital of France?"},
            {"question": "x", "temperature": -1},
            {"question": "Capital of Spain?"},
        ],
        backend=backend,
        temperature=0,
    )
    assert states[0].error() is None and states[2].error() is None
    assert "temperature" in str(states[1].error())
    assert states[0]["answer"] and states[2]["answer"]


CODE = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"


@rt.function
def edit(s, code, predicted=None):
    s += rt.user("Rewrite this Python code, renaming the function area to surface:\n\n" + code)
    s += rt.assistant(rt.gen("code", max_tokens=48, prediction=predicted))


def test_a_prediction_changes_nothing_but_the_speed(backend) -> None:
    plain = edit.run(code=CODE, backend=backend, temperature=0)
    assert "prediction_tokens" not in plain.get_meta_info("code")
    for predicted in (plain["code"], CODE):  # the answer itself; the code before the edit
        s = edit.run(code=CODE, predicted=predicted, backend=backend, temperature=0)
        assert s["code"] == plain["code"]
        meta = s.get_meta_info("code")
        assert meta["prediction_tokens"] > 20 and meta["prediction_accepted_tokens"] > 10, meta
    # A program-wide default, as any sampling parameter: the same answer again.
    s = edit.run(code=CODE, backend=backend, temperature=0, prediction=plain["code"])
    assert s["code"] == plain["code"] and s.get_meta_info("code")["prediction_accepted_tokens"]


def test_code_edit_example(backend, capsys) -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "code_edit.py"
    spec = importlib.util.spec_from_file_location("code_edit", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(backend)  # asserts the answer is the same with the prediction
    kept = re.search(r"\((\d+) of its (\d+) tokens kept", capsys.readouterr().out)
    assert kept and int(kept.group(1)) > 10, kept


def test_logit_bias_pushes_and_bans_tokens(backend, tokenizer) -> None:
    """logit_bias as a gen's parameter and as a program-wide default (int keys here; the
    server gets them as JSON strings)."""
    yes = tokenizer.encode(" yes", add_special_tokens=False)[0]
    ask = rt.function(lambda s: s.__iadd__("The capital of France is" + rt.gen("x", max_tokens=4)))
    plain = ask.run(backend=backend, temperature=0)
    first = tokenizer.encode(plain["x"], add_special_tokens=False)[0]
    pushed = ask.run(backend=backend, temperature=0, logit_bias={yes: 100})
    assert pushed["x"] == tokenizer.decode([yes] * 4)
    banned = ask.run(backend=backend, temperature=0, logit_bias={first: -100})
    assert banned["x"] != plain["x"]
    assert first not in tokenizer.encode(banned["x"], add_special_tokens=False)
    one = rt.function(
        lambda s: s.__iadd__("Q: " + rt.gen("y", max_tokens=3, logit_bias={yes: 100}))
    )
    assert one.run(backend=backend, temperature=0)["y"] == tokenizer.decode([yes] * 3)
    allowed = tokenizer.encode(" yes no", add_special_tokens=False)
    only = ask.run(backend=backend, temperature=1.0, seed=3, allowed_token_ids=allowed)
    assert only["x"] and set(only["x"].split()) <= {"yes", "no"}, only["x"]
