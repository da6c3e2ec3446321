"""The HTTP side: no torch in a client process, and the OpenAI-compatible backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import radixrt as rt

CLIENT = textwrap.dedent("""
    import sys
    import radixrt as rt

    @rt.function
    def qa(s, question):
        s += rt.system("You are a concise assistant.")
        s += rt.user(question)
        s += rt.assistant(rt.gen("answer", max_tokens=8, stop="\\n"))
        s += "Label: " + rt.select("label", ["city", "country"])

    rt.set_default_backend(rt.RuntimeEndpoint(sys.argv[1]))
    state = qa.run(question="What is the capital of France?", temperature=0)
    assert state["answer"] and state["label"] in ("city", "country")
    loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    assert not loaded, loaded
    runtime = sorted({".".join(m.split(".")[:2]) for m in sys.modules if m.startswith("radixrt.")
                      and m.split(".")[1] != "lang"})
    assert runtime == ["radixrt.core"], runtime
    print("ok")
""")


def test_client_process_never_imports_torch(lang_server) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, lang_server.url], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_runtime_endpoint_reports_server_errors(lang_server) -> None:
    backend = rt.RuntimeEndpoint(lang_server.url)
    prog = rt.function(lambda s: s.__iadd__("Hi" + rt.gen("x", max_tokens=10**6)))
    with pytest.raises(rt.ProgramError, match=r"gen\('x'\) failed: .*context length.*HTTP 400"):
        prog.run(backend=backend)
    down = rt.RuntimeEndpoint("http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(rt.ProgramError, match="cannot reach"):
        prog.run(backend=down)


def test_openai_compatible_gen_and_unsupported_primitives(lang_server) -> None:
    backend = rt.OpenAICompatible(lang_server.url, model="default")

    @rt.function
    def qa(s, question):
        s += rt.system("You are a concise assistant.")
        s += rt.user(question)
        s += rt.assistant(rt.gen("answer", max_tokens=12))

    s = qa.run(question="What is the capital of France?", backend=backend, temperature=0)
    assert "Paris" in s["answer"]
    assert [m["role"] for m in s.messages()] == ["system", "user", "assistant"]
    plain = rt.function(
        lambda s: s.__iadd__("The capital of France is" + rt.gen("x", max_tokens=4))
    )
    assert plain.run(backend=backend, temperature=0)["x"].strip()
    streamed = plain.run(backend=backend, temperature=0, stream=True)
    assert "".join(streamed.text_iter("x")) == streamed["x"]
    for expr, what in (
        (rt.select("c", ["a", "b"]), "select"),
        (rt.gen("r", regex="[0-9]+"), "regex"),
        (rt.gen("j", json_schema={"type": "object"}), "json_schema"),
    ):
        prog = rt.function(lambda s, e=expr: s.__iadd__("Q: " + e))
        with pytest.raises(rt.ProgramError, match=f"{what}.*not supported by this backend"):
            prog.run(backend=backend)


def test_openai_compatible_sends_a_prediction(lang_server) -> None:
    backend = rt.OpenAICompatible(lang_server.url, model="default")
    ask = "Repeat this line exactly: the quick brown fox jumps over the lazy dog"

    @rt.function
    def repeat(s, predicted=None):
        s += rt.user(ask)
        s += rt.assistant(rt.gen("line", max_tokens=16, prediction=predicted))

    plain = repeat.run(backend=backend, temperature=0)
    again = repeat.run(predicted=plain["line"], backend=backend, temperature=0)
    assert again["line"] == plain["line"]
    assert again.get_meta_info("line")["prediction_accepted_tokens"] > 0
    text = rt.function(
        lambda s, p=None: s.__iadd__(ask + "\n" + rt.gen("x", max_tokens=8, prediction=p))
    )
    first = text.run(backend=backend, temperature=0)
    again = text.run(p=first["x"], backend=backend, temperature=0)  # /completions: left out
    assert again["x"] == first["x"] and "prediction_accepted_tokens" not in again.get_meta_info("x")


def test_openai_compatible_sends_logit_bias(lang_server, tokenizer) -> None:
    backend = rt.OpenAICompatible(lang_server.url, model="default")
    yes = tokenizer.encode(" yes", add_special_tokens=False)[0]
    prog = rt.function(lambda s: s.__iadd__("Q: " + rt.gen("x", max_tokens=3)))
    assert prog.run(backend=backend, temperature=0, logit_bias={yes: 100})["x"] == (
        tokenizer.decode([yes] * 3)
    )
    assert prog.run(backend=backend, temperature=0, allowed_token_ids=[yes])["x"] == (
        tokenizer.decode([yes] * 3)
    )
