"""The interpreter on a scripted backend: select scoring, typed gens, roles, fork/join,
batches, tracing and error propagation, without a model."""

from __future__ import annotations

import asyncio
import time

import pytest
from lang_fakes import CHATML, FakeBackend, token_logprob, tokenize
from radixrt_lang.chat_template import ChatTemplate
from radixrt_lang.ir import DEFAULT_PARAMS, SamplingParams
from radixrt_lang.typed import parse

import radixrt.lang as rt


def test_sampling_params_merge_and_aliases() -> None:
    p = SamplingParams.from_kwargs({"max_tokens": 8, "stop": "\n"})
    merged = p.merged(SamplingParams(temperature=0.5, max_new_tokens=99)).merged(DEFAULT_PARAMS)
    assert merged.to_dict() == {"max_new_tokens": 8, "stop": ["\n"], "temperature": 0.5}
    with pytest.raises(TypeError, match="unknown sampling parameter 'tempurature'"):
        rt.gen("x", tempurature=0)


def test_parse_typed_values() -> None:
    assert parse(int, " 42 apples") == (42, "42")
    assert parse(float, "about -3.5e2 or so") == (-350.0, "-3.5e2")
    assert parse(bool, "Yes, it is") == (True, "Yes")
    with pytest.raises(rt.OutputParseError, match="expected int"):
        parse(int, "none")


def test_role_parts_follow_the_template() -> None:
    smol = (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nDEFAULT<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}"
    )
    t = ChatTemplate.from_jinja(smol)
    assert t.role_parts([], "user") == (
        "<|im_start|>system\nDEFAULT<|im_end|>\n<|im_start|>user\n",
        "<|im_end|>\n",
    )
    assert t.role_parts([{"role": "system", "content": "x"}], "assistant") == (
        "<|im_start|>assistant\n",
        "<|im_end|>\n",
    )


def test_roles_messages_and_var_scope() -> None:
    backend = FakeBackend(lambda prompt, params: "Paris")

    @rt.function
    def chat(s, q):
        s += rt.system("Be brief.")
        with s.user():
            with s.var_scope("question"):
                s += q
        s += rt.assistant(rt.gen("a", max_tokens=4))

    s = chat.run(q="Capital of France?", backend=backend)
    assert s["question"] == "Capital of France?" and s["a"] == "Paris"
    assert s.messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
    ]
    assert s.text() == ChatTemplate.from_jinja(CHATML).render(s.messages())
    html = s._repr_html_()
    assert '<span class="rt-gen" title="gen a">Paris</span>' in html and "rt-calls" in html


def test_select_finds_where_choices_start_even_when_tokens_merge() -> None:
    backend = FakeBackend()

    @rt.function
    def pick(s):
        s += "xxxxxxxa"  # "a" + "b..." merges into the token "ab"
        s += rt.select("c", ["bc", "zz"])

    s = pick.run(backend=backend)
    meta = s.get_meta_info("c")
    ab, c, z = tokenize("ab")[0], tokenize("c")[0], tokenize("z")[0]
    assert [[t for _, t in span] for span in meta["input_token_logprobs"]] == [[ab, c], [z, z]]
    expected = [(token_logprob(ab) + token_logprob(c)) / 2, token_logprob(z)]
    assert meta["normalized_prompt_logprobs"] == pytest.approx(expected)
    assert s["c"] == ["bc", "zz"][0 if expected[0] >= expected[1] else 1]
    # the prompt was sent alone first (cached), then prompt + each choice in one batch
    scoring = [call for call in backend.calls if call[1].get("max_new_tokens") == 0]
    assert scoring[0][0] == ["xxxxxxxa"]
    assert scoring[1][0] == ["xxxxxxxa", "xxxxxxxabc", "xxxxxxxazz"]
    assert scoring[1][1]["logprob_start_len"] == len(tokenize("xxxxxxxa")) - 4


def test_select_unconditional_scores_choice_ids_alone() -> None:
    backend = FakeBackend()
    s = rt.function(
        lambda s: s.__iadd__(
            "Pick: "
            + rt.select("c", ["yes", "no"], choices_method="unconditional_likelihood_normalized")
        )
    ).run(backend=backend)
    assert s.get_meta_info("c")["choices_method"] == "unconditional_likelihood_normalized"
    assert backend.calls[-1][0] == [tokenize("yes"), tokenize("no")]


def test_typed_gens_without_regex_support() -> None:
    replies = {"n": " 12 or so\n", "f": "3.25!", "s": 'Bob" and more'}

    @rt.function
    def typed(s):
        for key, expr in (
            ("n", rt.gen_int("n")),
            ("f", rt.gen("f", dtype=float)),
            ("s", rt.gen_string("s")),
            ("b", rt.gen("b", dtype=bool)),
        ):
            s += f"{key}=" + expr + "\n"

    backend = FakeBackend(lambda prompt, params: replies[prompt.rsplit("\n", 1)[-1][0]])
    s = typed.run(backend=backend)
    assert (s["n"], s["f"], s["s"], s["b"]) == (12, 3.25, "Bob", s["b"])
    assert isinstance(s["b"], bool)
    assert s.text().startswith('n=12\nf=3.25\ns="Bob"\nb=')
    assert s.get_meta_info("n")["raw_text"] == " 12 or so"
    gen_calls = [c for c in backend.calls if c[1].get("max_new_tokens") != 0]
    assert gen_calls[0][1]["max_new_tokens"] == 16 and "\n" in gen_calls[0][1]["stop"]
    assert all("regex" not in c[1] for c in backend.calls)


def test_regex_needs_a_backend_that_enforces_it() -> None:
    prog = rt.function(lambda s: s.__iadd__(rt.gen("x", regex="[0-9]+")))
    with pytest.raises(rt.ProgramError, match=r"gen\('x'\) failed: regex is not supported"):
        prog.run(backend=FakeBackend())
    assert prog.run(backend=FakeBackend(lambda p, k: "123", regex=True))["x"] == "123"
    with pytest.raises(rt.ProgramError, match="does not match the regex"):
        prog.run(backend=FakeBackend(lambda p, k: "12a", regex=True))


def test_fork_join_gather_and_concat() -> None:
    backend = FakeBackend(lambda prompt, params: f"<{prompt[-1]}>")

    @rt.function
    def tree(s):
        s += "Root:"
        forks = s.fork(3)
        forks += lambda i: str(i) + rt.gen("leaf")
        forks.join()
        more = s.fork(2)
        more += ["A", "B"]
        more.join("concat")

    s = tree.run(backend=backend)
    assert s["leaf"] == ["<0>", "<1>", "<2>"]
    assert s.text() == "Root:AB"
    assert backend.calls[0] == (["Root:"], {"max_new_tokens": 0})  # prefix cached first


def test_errors_name_the_primitive_and_stop_the_program() -> None:
    backend = FakeBackend()
    after = []

    @rt.function
    def bad(s):
        s += "Hi " + rt.gen("a", temperature=-1)
        after.append(s["a"])

    with pytest.raises(
        rt.ProgramError,
        match=r"gen\('a'\) failed: invalid sampling parameter "
        r"temperature",
    ):
        bad.run(backend=backend)
    assert after == []


def test_run_batch_keeps_order_isolates_errors_and_caches_the_prefix() -> None:
    backend = FakeBackend(lambda prompt, params: prompt.split("Q:")[-1].upper())

    @rt.function
    def qa(s, q, t=0.0):
        s += rt.system("You answer questions.")
        s += rt.user("Q:" + q)
        s += rt.assistant(rt.gen("a", temperature=t))

    items = [{"q": f"q{i}"} for i in range(8)]
    items[3]["t"] = -1
    states = qa.run_batch(items, num_threads=4, backend=backend)
    prefix = "<|im_start|>system\nYou answer questions.<|im_end|>\n<|im_start|>user\nQ:"
    assert backend.calls[0] == ([prefix], {"max_new_tokens": 0})
    for i, s in enumerate(states):
        if i == 3:
            assert isinstance(s.error(), rt.ProgramError) and "temperature" in str(s.error())
        else:
            assert s.error() is None and s["a"] == f"Q{i}<|IM_END|>\n<|IM_START|>ASSISTANT\n"


def test_bind_and_trace_use_bound_arguments() -> None:
    backend = FakeBackend()

    @rt.function
    def prog(s, topic, q):
        s += f"Topic: {topic}\n"
        s += "Q: " + q + rt.gen("a")

    assert prog.cache_prefix(backend) == ""
    assert prog.bind(topic="cats").cache_prefix(backend) == "Topic: cats\nQ: "
    assert prog.bind(topic="cats").run(q="why", backend=backend)["a"] == "ok"


def test_stream_and_asyncio() -> None:
    backend = FakeBackend(lambda prompt, params: "abcdef")
    prog = rt.function(lambda s: s.__iadd__("> " + rt.gen("x")))
    state = prog.run(stream=True, backend=backend)
    assert "".join(state.text_iter("x")) == "abcdef"  # pieces may coalesce
    assert "".join(prog.run(stream=True, backend=backend).text_iter()) == "> abcdef"

    @rt.function
    async def twice(s, word):
        s += word + rt.gen("x")
        first = await s.aget("x")
        s += first

    async def main() -> list[str]:
        one = await twice.arun(word="w", backend=backend)
        many = await twice.arun_batch([{"word": "a"}, {"word": "b"}], backend=backend)
        return [await one.atext(), *[await m.atext() for m in many]]

    assert asyncio.run(main()) == ["wabcdefabcdef", "aabcdefabcdef", "babcdefabcdef"]


def test_no_backend_is_a_clear_error() -> None:
    rt.set_default_backend(None)
    with pytest.raises(RuntimeError, match="no backend"):
        rt.function(lambda s: None).run()


def test_reads_wait_for_the_latest_gen_of_a_name() -> None:
    counter = iter(range(100))

    def reply(prompt: str, params: dict) -> str:
        time.sleep(0.02)
        return str(next(counter))

    @rt.function
    def loop(s):
        seen = []
        for _ in range(3):
            s += rt.gen("x") + ";"
            seen.append(s["x"])
        s.set_var("seen", seen)

    assert loop.run(backend=FakeBackend(reply))["seen"] == ["0", "1", "2"]


def test_gens_without_roles_never_ask_for_a_chat_template() -> None:
    class NoTemplate(FakeBackend):
        def _load_chat_template(self) -> ChatTemplate:
            raise rt.BackendError("the model has no chat template; roles need one")

    @rt.function
    def plain(s):
        s += "Q: 1+1?\nA:" + rt.gen("a", max_tokens=4)

    state = plain.run(backend=NoTemplate(reply=lambda p, params: " 2"))
    assert state["a"] == " 2"

    @rt.function
    def chat(s):
        s += rt.user("hi")

    with pytest.raises(rt.ProgramError, match="user\\(\\) failed: .*no chat template"):
        chat.run(backend=NoTemplate())
