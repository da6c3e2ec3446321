"""Grammar backends on SmolLM2's tokenizer, the compile cache, forced tokens and the sampler's
vocabulary mask; no model runs here."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import torch

from radixrt.core import Req, SamplingParams
from radixrt.executor.sampler import Sampler
from radixrt.grammar import GRAMMAR_BACKENDS, create_grammar_backend
from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec
from radixrt.grammar.compiler import CACHE_SIZE, GrammarCompiler
from radixrt.scheduler.grammar_queue import GrammarQueue, GrammarState, GrammarStats

VOCAB = 49152
EOS = 2
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}},
    "required": ["name"],
    "additionalProperties": False,
}


def _allowed(matcher: BaseGrammarMatcher) -> set[int]:
    mask = torch.zeros(1, (VOCAB + 31) // 32, dtype=torch.int32)
    matcher.fill_mask(mask, 0)
    bits = (mask[0, :, None] >> torch.arange(32, dtype=torch.int32)) & 1
    return set(bits.flatten().nonzero()[:, 0].tolist())


@pytest.mark.parametrize(
    "spec, text",
    [
        (GrammarSpec("regex", r"[0-9]{3}-[A-Z]{2}"), "123-AB"),
        (GrammarSpec("json_schema", json.dumps(PERSON)), '{"name": "Bob"}'),
    ],
)
def test_a_valid_text_is_accepted_and_then_only_eos(backend, tokenizer, spec, text) -> None:
    matcher = backend.new_matcher(backend.compile(spec))
    assert EOS not in _allowed(matcher)
    for token in tokenizer.encode(text):
        assert token in _allowed(matcher)
        assert matcher.accept(token)
    assert _allowed(matcher) == {EOS}


def test_a_disallowed_token_is_refused(backend, tokenizer) -> None:
    matcher = backend.new_matcher(backend.compile(GrammarSpec("regex", "[0-9]+")))
    assert not matcher.accept(tokenizer.encode("abc")[0])


@pytest.mark.parametrize(
    "spec",
    [
        GrammarSpec("regex", "a(b"),
        GrammarSpec("json_schema", '{"type": "no-such-type"}'),
        GrammarSpec("json_schema", "{not json"),
    ],
)
def test_bad_specs_raise_grammar_error(backend, spec) -> None:
    with pytest.raises(GrammarError, match="invalid"):
        backend.compile(spec)


def test_ebnf_is_lark_on_llguidance_and_refused_by_outlines(tokenizer) -> None:
    lark = 'start: "yes" | "no"'
    llg = create_grammar_backend("llguidance", tokenizer, VOCAB, [EOS])
    matcher = llg.new_matcher(llg.compile(GrammarSpec("ebnf", lark)))
    assert all(matcher.accept(t) for t in tokenizer.encode("yes"))
    outlines = create_grammar_backend("outlines", tokenizer, VOCAB, [EOS])
    with pytest.raises(GrammarError, match="ebnf.*tool_choice auto.*--grammar-backend auto"):
        outlines.compile(GrammarSpec("ebnf", lark))  # (the 400 says what else is Lark, and why)


ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "items": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "ship": {
            "type": "object",
            "properties": {"fast": {"type": "boolean"}, "note": {"type": "null"}},
            "required": ["fast"],
        },
        "tag": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 4}]},
        "size": {"enum": [[1, 2], {"q": None}]},  # values written in the layout too
    },
    "required": ["id", "items"],
    "additionalProperties": False,
}


def _accepts(backend: BaseGrammarBackend, spec: GrammarSpec, tokenizer: Any, text: str) -> bool:
    matcher = backend.new_matcher(backend.compile(spec))
    return all(matcher.accept(t) for t in tokenizer.encode(text)) and matcher.is_accepting()


@pytest.mark.parametrize(
    "doc",
    [
        {"id": 7, "items": []},
        {"id": -1, "items": ["ab", "c d"], "ship": {"fast": True, "note": None}},
        {"id": 0, "items": ["x"], "ship": {"fast": False}, "tag": "t"},
        {"id": 12, "items": ["a", "b", "c"], "tag": 3, "size": [1, 2]},
        {"id": 5, "items": [], "size": {"q": None}},
    ],
)
def test_every_backend_writes_a_schema_in_the_one_json_layout(backend, tokenizer, doc) -> None:
    """The auto backend falls back from outlines to llguidance when the automaton is slow to
    compile: both must accept the same texts, or outputs would depend on the machine's load.
    The layout is `json.dumps`' default (`{"a": 1, "b": [2]}`); no other whitespace."""
    spec = GrammarSpec("json_schema", json.dumps(ORDER))
    text = json.dumps(doc)
    assert _accepts(backend, spec, tokenizer, text), text
    variants = {
        json.dumps(doc, separators=(",", ":")),
        json.dumps(doc, separators=(", ", ":")),
        json.dumps(doc, separators=(",", ": ")),
        json.dumps(doc, separators=(", ", " : ")),
        json.dumps(doc, indent=1),
        "{ " + text[1:],
        text[:-1] + " }",
        text.replace("[", "[ ", 1),
        text.replace("]", " ]", 1),
        text + " ",
    } - {text}
    for variant in variants:
        assert not _accepts(backend, spec, tokenizer, variant), variant


class _SlowBackend(BaseGrammarBackend):
    """Compiles to the spec's text after `release` is set; 'bad' specs fail."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.num_compiles = 0

    def compile(self, spec: GrammarSpec) -> Any:
        self.num_compiles += 1
        self.release.wait(5)
        if spec.text == "bad":
            raise GrammarError("invalid regex: bad")
        return spec.text

    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        raise NotImplementedError


def test_compiler_caches_times_out_and_does_not_cache_failures() -> None:
    slow = _SlowBackend()
    compiler = GrammarCompiler(lambda: slow, timeout_s=0.05)
    spec = GrammarSpec("regex", "x")
    with pytest.raises(GrammarError, match="took longer than 0.05 s"):
        compiler.compile(spec)
    slow.release.set()
    time.sleep(0.05)
    with pytest.raises(GrammarError, match="took longer than 0.05 s"):
        compiler.compile(spec)  # refused at once: a timed-out spec is not compiled again
    assert slow.num_compiles == 1
    ok = GrammarSpec("regex", "y")
    assert compiler.compile(ok) == "y" and compiler.compile(ok) == "y"
    assert compiler.submit(ok) is compiler.submit(ok)
    before = slow.num_compiles
    for _ in range(2):
        with pytest.raises(GrammarError, match="bad"):
            compiler.compile(GrammarSpec("regex", "bad"))
    assert slow.num_compiles == before + 2  # a failure is compiled again, not cached
    for i in range(CACHE_SIZE + 5):
        compiler.submit(GrammarSpec("regex", str(i))).result()
    assert len(compiler._cache) == CACHE_SIZE
    compiler.shutdown()


class _BitsMatcher(BaseGrammarMatcher):
    """Allows the tokens of `steps[i]` at position i."""

    def __init__(self, steps: list[set[int]]) -> None:
        self.steps, self.pos = steps, 0

    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        bitmask[row].zero_()
        for t in self.steps[self.pos]:
            bitmask[row, t // 32] |= (1 << (t % 32)) - (1 << 32 if t % 32 == 31 else 0)

    def accept(self, token_id: int) -> bool:
        ok = token_id in self.steps[self.pos]
        self.pos += 1
        return ok

    def is_accepting(self) -> bool:
        return self.pos == len(self.steps)

    def rollback(self, num_tokens: int) -> None:
        self.pos -= num_tokens


def test_forced_token_is_the_single_allowed_bit() -> None:
    stats = GrammarStats()
    state = GrammarState(_BitsMatcher([{31}, {63, 64}, {VOCAB - 1}, set()]), VOCAB // 32, stats)
    assert state.forced_token() == 31
    assert state.accept(31) and state.forced_token() is None
    assert state.accept(64) and state.forced_token() == VOCAB - 1
    assert state.accept(VOCAB - 1) and state.forced_token() is None
    assert stats.num_masks == 4


def _req(
    steps: list[set[int]] | None, max_new: int = 10, temperature: float = 0.0, **params: Any
) -> Req:
    sp = SamplingParams(max_new_tokens=max_new, temperature=temperature, **params)
    req = Req("r", [1], sp)
    if steps is not None:
        req.grammar = GrammarState(_BitsMatcher(steps), (VOCAB + 31) // 32, GrammarStats())
    return req


def test_jump_forward_appends_forced_tokens_up_to_max_new_tokens() -> None:
    queue = GrammarQueue(GrammarCompiler(_SlowBackend, 1.0), VOCAB, jump_forward=True)
    req = _req([{5, 6}, {7}, {8}, {9}, {1, 2}], max_new=3)
    req.output_ids.append(5)
    queue.accept(req, lambda r: None)
    assert req.output_ids == [5, 7, 8] and queue.stats.forced_tokens == 2
    off = GrammarQueue(GrammarCompiler(_SlowBackend, 1.0), VOCAB, jump_forward=False)
    req = _req([{5, 6}, {7}, {8}])
    req.output_ids.append(5)
    off.accept(req, lambda r: None)
    assert req.output_ids == [5]


def test_sampler_masks_constrained_rows_only() -> None:
    torch.manual_seed(0)
    sampler = Sampler(VOCAB, [EOS])
    logits = torch.randn(3, VOCAB + 64)  # the model's logits may be wider than the vocabulary
    logits[:, 100] = 50.0
    reqs = [_req([{7, 8}]), _req(None), _req([{9, 10}], temperature=1.0)]
    queue = GrammarQueue(GrammarCompiler(_SlowBackend, 1.0), VOCAB, jump_forward=True)
    mask = queue.vocab_mask(reqs)
    assert mask is not None and mask.shape == (3, VOCAB // 32)
    for _ in range(5):
        ids = sampler.sample(logits, reqs, mask).next_token_ids
        assert ids[0] == (7 if logits[0, 7] > logits[0, 8] else 8)
        assert ids[1] == 100 and ids[2] in (9, 10)
    assert queue.vocab_mask([_req(None)]) is None


@pytest.mark.parametrize(
    "params",
    [
        {"top_k": 5},
        {"top_p": 0.9},
        {"min_p": 0.2},
        {"top_k": 40, "top_p": 0.5},
        {"repetition_penalty": 1.3, "frequency_penalty": 0.5},
    ],
)
def test_sampling_filters_never_pick_a_masked_token(params) -> None:
    torch.manual_seed(1)
    sampler = Sampler(VOCAB, [EOS])
    allowed = {11, 300, 4000, VOCAB - 1}
    reqs = [_req([allowed], temperature=0.8, **params) for _ in range(4)]
    for r in reqs:
        r.output_ids.append(300)
    queue = GrammarQueue(GrammarCompiler(_SlowBackend, 1.0), VOCAB, jump_forward=True)
    for _ in range(20):
        logits = torch.randn(4, VOCAB) * 4
        ids = sampler.sample(logits, reqs, queue.vocab_mask(reqs)).next_token_ids
        assert set(ids) <= allowed


def test_the_registry_and_the_config_know_the_same_backends() -> None:
    from radixrt.core.config import GRAMMAR_BACKEND_NAMES
    from radixrt.grammar import DEFAULT_GRAMMAR_BACKEND

    assert tuple(GRAMMAR_BACKENDS) == GRAMMAR_BACKEND_NAMES
    assert DEFAULT_GRAMMAR_BACKEND == GRAMMAR_BACKEND_NAMES[0]
