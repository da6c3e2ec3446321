"""outlines-core: a regex (JSON schemas are first turned into one) compiled into a token-level
automaton over the whole vocabulary. Compiling costs more than llguidance's lazy parser (it
walks the vocabulary once per automaton state); masks are then table lookups. No `ebnf`.

Matchers walk the automaton's tables (token_automaton.py, which also works around outlines-core
refusing some continuations where the regex could end); its exact distances to the end let
them bound the output's length: with a budget, only tokens that can still finish in time.
A JSON schema's numeric bounds are written over the digits where they can be (integers;
numbers with integer bounds: schema_bounds.py) and not enforced otherwise.
"""

from __future__ import annotations

from typing import Any

import outlines_core  # type: ignore[import-untyped]
import torch

from radixrt.grammar.base import (
    UNREACHABLE,
    BaseGrammarBackend,
    BaseGrammarMatcher,
    GrammarError,
    GrammarSpec,
    StateHistory,
    mask_bit,
)
from radixrt.grammar.schema_regex import schema_regex
from radixrt.grammar.token_automaton import TokenAutomaton

_SENTINEL = b"\x00"  # follows every regex; its token id is vocab_size (never sampled)


class OutlinesMatcher(BaseGrammarMatcher):
    """A position in a TokenAutomaton: masks are its tables, plus the stop tokens where the
    output may end."""

    bounds_length = True

    def __init__(self, automaton: TokenAutomaton, eos_token_ids: list[int]) -> None:
        self._automaton = automaton
        self._state: int | None = automaton.start  # None: a refused token broke it
        self._eos = eos_token_ids
        self._before: StateHistory[int] = StateHistory()

    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        dst = bitmask[row]
        if self._state is None:
            dst.zero_()
            return
        dst.copy_(torch.from_numpy(self._automaton.mask(self._state, budget)))
        if self._automaton.accepting[self._state]:
            for t in self._eos:
                dst[t // 32] |= mask_bit(t % 32)

    def accept(self, token_id: int) -> bool:
        state = self._state
        self._state = None if state is None else self._automaton.next_state(state, token_id)
        if state is not None and self._state is not None:
            self._before.push(state)
        return self._state is not None

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self._state = self._before.pop(num_tokens)

    def is_accepting(self) -> bool:
        return self._state is not None and bool(self._automaton.accepting[self._state])

    def min_tokens(self) -> int:
        return UNREACHABLE if self._state is None else self._automaton.distance(self._state)


class OutlinesBackend(BaseGrammarBackend):
    name = "outlines"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> None:
        self._eos = list(eos_token_ids)
        self._vocab_size = vocab_size
        # The model's tokens with a NUL byte are left out: NUL is the end sentinel.
        pieces = {b: ids for b, ids in _token_bytes(tokenizer, vocab_size).items() if 0 not in b}
        pieces[_SENTINEL] = [vocab_size]
        self._vocab = outlines_core.Vocabulary(eos_token_ids[0], pieces)

    def compile(self, spec: GrammarSpec) -> TokenAutomaton:
        return self.compile_regex(spec, self.regex_of(spec))

    @staticmethod
    def regex_of(spec: GrammarSpec) -> str:
        """The regex `spec` is compiled from (a JSON schema's is built here, cheaply)."""
        if spec.kind == "ebnf":
            raise GrammarError(
                "the outlines grammar backend does not support ebnf grammars (a request's own, "
                "or the Lark grammar of its tools: tool_choice auto, and forced calls a regex "
                "cannot write, opened by a special token or with a schema keyword no regex "
                "enforces); start the server with --grammar-backend auto or llguidance"
            )
        if spec.kind == "regex":
            return spec.text
        return schema_regex(spec.text)

    def compile_regex(self, spec: GrammarSpec, regex: str) -> TokenAutomaton:
        try:
            index = outlines_core.Index(f"(?:{regex})\\x00", self._vocab)
        except (ValueError, TypeError) as e:
            raise GrammarError(f"invalid {spec.kind}: {e}") from None
        return TokenAutomaton(index, self._vocab_size, sentinel=self._vocab_size)

    def new_matcher(self, compiled: TokenAutomaton) -> OutlinesMatcher:
        return OutlinesMatcher(compiled, self._eos)


def _token_bytes(tokenizer: Any, vocab_size: int) -> dict[bytes, list[int]]:
    """The bytes each non-special token id < vocab_size stands for (byte-level BPE alphabet,
    or SentencePiece's '▁' and <0xNN> pieces)."""
    byte_of = _byte_level_alphabet()
    special = set(tokenizer.all_special_ids)
    out: dict[bytes, list[int]] = {}
    for piece, idx in tokenizer.get_vocab().items():
        if idx in special or idx >= vocab_size:
            continue
        if all(c in byte_of for c in piece):
            raw = bytes(byte_of[c] for c in piece)
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            raw = bytes([int(piece[3:5], 16)])
        else:
            raw = piece.replace("\u2581", " ").encode()
        out.setdefault(raw, []).append(idx)
    return out


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-ins: char -> byte. Printable Latin-1 bytes stand for
    themselves; the other bytes, in order, take the code points from 256 up."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out = {chr(b): b for b in keep}
    extra = (b for b in range(256) if b not in set(keep))
    for n, b in enumerate(extra):
        out[chr(256 + n)] = b
    return out
