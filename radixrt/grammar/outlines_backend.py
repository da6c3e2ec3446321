"""outlines-core: a regex (JSON schemas are first turned into one) compiled into a token-level
automaton over the whole vocabulary. Compiling costs more than llguidance's lazy parser (it
walks the vocabulary once per automaton state); masks are then table lookups. No `ebnf`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import outlines_core  # type: ignore[import-untyped]

from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec

if TYPE_CHECKING:
    import torch

# JSON whitespace between tokens: at most one space, so a schema's output length stays bounded.
_JSON_WHITESPACE = r"[ ]?"


class OutlinesMatcher(BaseGrammarMatcher):
    def __init__(self, guide: outlines_core.Guide, eos_token_id: int, extra_eos: list[int]) -> None:
        self._guide = guide
        self._eos = eos_token_id
        self._extra_eos = extra_eos  # other stop ids, allowed whenever eos_token_id is

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        dst = bitmask[row]
        dst.zero_()
        self._guide.write_mask_into(dst.data_ptr(), dst.numel(), 4)
        if self._extra_eos and (int(dst[self._eos // 32]) >> (self._eos % 32)) & 1:
            for t in self._extra_eos:
                dst[t // 32] |= _bit(t % 32)

    def accept(self, token_id: int) -> bool:
        try:
            self._guide.advance(token_id, False)
        except ValueError:
            return False
        return True


class OutlinesBackend(BaseGrammarBackend):
    name = "outlines"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> None:
        self._eos = eos_token_ids[0]
        self._extra_eos = list(eos_token_ids[1:])
        self._vocab = outlines_core.Vocabulary(self._eos, _token_bytes(tokenizer, vocab_size))

    def compile(self, spec: GrammarSpec) -> outlines_core.Index:
        if spec.kind == "ebnf":
            raise GrammarError("the outlines grammar backend does not support ebnf grammars")
        try:
            regex = spec.text
            if spec.kind == "json_schema":
                regex = outlines_core.json_schema.build_regex_from_schema(
                    spec.text, _JSON_WHITESPACE
                )
            return outlines_core.Index(regex, self._vocab)
        except (ValueError, TypeError) as e:
            raise GrammarError(f"invalid {spec.kind}: {e}") from None

    def new_matcher(self, compiled: outlines_core.Index) -> OutlinesMatcher:
        return OutlinesMatcher(outlines_core.Guide(compiled), self._eos, self._extra_eos)


def _bit(i: int) -> int:
    """Bit i of an int32 word as a Python int in int32 range."""
    return (1 << i) - (1 << 32) if i == 31 else 1 << i


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
