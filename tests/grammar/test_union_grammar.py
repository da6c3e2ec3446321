"""A forced call over 40 tools as the union of per-tool automata, on SmolLM2's tokenizer (no
model runs): walks that pick any token the budget masks allow end with a schema-valid call
within the budget; the union accepts exactly the strings some tool's own regex accepts; a
union whose branches are not ready in time serves llguidance until they are."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import torch

from radixrt.grammar.auto_backend import AutoBackend
from radixrt.grammar.base import GrammarSpec
from radixrt.grammar.llguidance_backend import LLGuidanceMatcher
from radixrt.grammar.outlines_backend import OutlinesMatcher
from radixrt.grammar.union import UnionGrammar, UnionMatcher, split_alternatives
from radixrt.serve.http.tools import ToolChoice, ToolSpec
from radixrt.serve.http.tools.formats import HERMES
from radixrt.serve.http.tools.grammar import forced_call_spec


def _tool(i: int) -> ToolSpec:
    props = {
        "n": {"type": "integer", "minimum": i, "maximum": 100 + 37 * i},
        "e": {"type": "string", "enum": ["low", "high", f"v{i}"]},
        "s": {"type": "string", "maxLength": 3},
        "a": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "maxItems": 2,
        },
    }
    required = ["n", "e"] if i % 2 else ["s", "a", "n"]
    schema = {"type": "object", "properties": props, "required": required}
    return ToolSpec(f"tool_{i}", "", {**schema, "additionalProperties": False})


TOOLS = [_tool(i) for i in range(40)]
BY_NAME = {t.name: t for t in TOOLS}


@pytest.fixture(scope="module")
def setup(smollm2_path: Path) -> Any:
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    backend = AutoBackend(tok, len(tok), [tok.eos_token_id])
    backend.time_limit_s = 60.0
    regex = forced_call_spec(HERMES, TOOLS, ToolChoice("required"))["regex"]
    return tok, backend, regex, backend.compile(GrammarSpec("regex", regex))


def _allowed(matcher: Any, vocab: int, budget: int) -> list[int]:
    mask = torch.zeros(1, (vocab + 31) // 32, dtype=torch.int32)
    matcher.fill_mask(mask, 0, budget)
    bits = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")
    return np.flatnonzero(bits).tolist()


def test_split_alternatives_keeps_groups_classes_and_escapes() -> None:
    assert split_alternatives("ab") == ["ab"]
    assert split_alternatives("a|b(c|d)|[|x]|\\|e|") == ["a", "b(c|d)", "[|x]", "\\|e", ""]
    assert split_alternatives("[]|]x|[^]|a]|y") == ["[]|]x", "[^]|a]", "y"]


def test_forty_tools_required_is_bounded_and_valid(setup: Any) -> None:
    tok, backend, _, compiled = setup
    assert isinstance(compiled, UnionGrammar) and compiled.fallback is None
    vocab = len(tok)
    for seed in range(12):
        rng = random.Random(seed)
        matcher = backend.new_matcher(compiled)
        assert isinstance(matcher, UnionMatcher)
        budget = matcher.min_tokens() + rng.randrange(0, 12)
        out: list[int] = []
        for k in range(budget):
            token = rng.choice(_allowed(matcher, vocab, budget - k))
            if token == tok.eos_token_id:
                break
            out.append(token)
            assert matcher.accept(token)
        assert matcher.is_accepting(), (seed, tok.decode(out))
        text = tok.decode(out)
        body = json.loads(text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
        jsonschema.validate(body["arguments"], BY_NAME[body["name"]].parameters)


def test_the_union_rolls_back_to_the_same_masks(setup: Any) -> None:
    tok, backend, _, compiled = setup
    matcher = backend.new_matcher(compiled)
    rng = random.Random(7)
    masks, walked = [], []
    for k in range(12):
        allowed = _allowed(matcher, len(tok), 64 - k)
        masks.append(allowed)
        token = rng.choice([t for t in allowed if t != tok.eos_token_id])
        assert matcher.accept(token)
        walked.append(token)
    matcher.rollback(5)
    assert _allowed(matcher, len(tok), 64 - 7) == masks[7]
    matcher.rollback(7)
    assert _allowed(matcher, len(tok), 64) == masks[0]
    assert all(matcher.accept(t) for t in walked)


def test_the_union_accepts_exactly_the_tools_languages(setup: Any) -> None:
    tok, backend, regex, compiled = setup
    branches = [re.compile(b) for b in split_alternatives(regex)]
    assert len(branches) == len(TOOLS)
    rng = random.Random(7)
    samples = []
    for _ in range(60):
        tool = rng.choice(TOOLS)
        args: dict[str, Any] = {"n": rng.randrange(0, 400), "e": rng.choice(["low", "v3", "mid"])}
        if rng.random() < 0.6:
            args["s"] = rng.choice(["", "ab", "abcd"])
            args["a"] = rng.sample(range(12), rng.randrange(0, 4))
        call = json.dumps({"name": tool.name, "arguments": args}, separators=(",", ":"))
        samples.append(f"<tool_call>\n{call}\n</tool_call>")
    samples += [s[: rng.randrange(len(s))] for s in samples[:10]]
    accepted = 0
    for text in samples:
        matcher = backend.new_matcher(compiled)
        ok = all(matcher.accept(t) for t in tok.encode(text)) and matcher.is_accepting()
        assert ok == any(b.fullmatch(text) for b in branches), text
        accepted += ok
    assert 5 < accepted < len(samples) - 5  # both sides of the property are exercised


def test_automata_not_ready_in_time_serve_llguidance_until_they_are(setup: Any) -> None:
    tok, _, regex, _ = setup
    backend = AutoBackend(tok, len(tok), [tok.eos_token_id])
    backend.time_limit_s = 1e-6  # no time to wait: every branch goes to the background
    few = "|".join(split_alternatives(regex)[:6])
    for text, bounded in ((few, UnionMatcher), (split_alternatives(regex)[7], OutlinesMatcher)):
        compiled = backend.compile(GrammarSpec("regex", text))  # never waits, never refused
        assert isinstance(compiled, UnionGrammar) and compiled.fallback is not None
        assert isinstance(backend.new_matcher(compiled), (LLGuidanceMatcher, bounded))
        for future in compiled.branches:
            future.result(timeout=60)
        assert isinstance(backend.new_matcher(compiled), bounded)
