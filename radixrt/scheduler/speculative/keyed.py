"""Key-tied lookup: where a request's last tokens match nothing long in its own tokens (the
start of a value after `"email": "`, whose 1-2 token suffix last led into another value), the
tokens that follow the same words in its prompt (`Email: ann@x.com`), the words compared by
their text up to case, whitespace, quotes and brackets. A guess like any other draft:
verification decides what is kept."""

from __future__ import annotations

from collections.abc import Callable

# Characters a token's key drops: whitespace, quotes and brackets (`"email":` and `Email:`
# both read `email`, `:`); a token of these alone has an empty key and is skipped.
_NOISE = " \t\r\n\"'`{}[]()"
# Keys matched: the last KEY_N non-empty keys (a word and the separator after it).
KEY_N = 2
# How far back the last KEY_N keys are looked for (tokens of empty key in between).
_SCAN = 8


class TokenTexts:
    """Token id -> its key, and the id of the same text without its leading space; both from
    the tokenizer on first use of a token and cached (a request reads a few hundred)."""

    def __init__(self, decode: Callable[[list[int]], str],
                 encode: Callable[[str], list[int]]) -> None:  # fmt: skip
        self._decode = decode
        self._encode = encode
        self._text: dict[int, str] = {}
        self._unspaced: dict[int, int] = {}
        self._quote: list[int | None] = []  # the token of ' "', once looked up

    def text(self, token: int) -> str:
        t = self._text.get(token)
        if t is None:
            t = self._text[token] = self._decode([token])
        return t

    def key(self, token: int) -> str:
        """The token's text lowercased without whitespace, quotes and brackets ('': none)."""
        return self.text(token).strip(_NOISE).lower()

    def opens(self, token: int) -> bool:
        """Whether the token's text ends in whitespace or a quote (a value starts after it,
        so a word there carries no space of its own)."""
        t = self.text(token)
        return bool(t) and t[-1] in " \t\n\"'`"

    def opening_quote(self) -> int | None:
        """The single token of ' "' (a JSON string value opening after its key's colon), or
        None where the tokenizer has none."""
        if not self._quote:
            ids = self._encode(' "')
            self._quote.append(ids[0] if len(ids) == 1 else None)
        return self._quote[0]

    def unspaced(self, token: int) -> int:
        """The single token of this token's text without its leading space; itself when the
        text has none or the rest is not one token."""
        u = self._unspaced.get(token)
        if u is None:
            t = self.text(token)
            ids = self._encode(t[1:]) if t[:1] == " " and len(t) > 1 else []
            u = self._unspaced[token] = ids[0] if len(ids) == 1 else token
        return u


class KeyedIndex:
    """A prompt's tokens indexed by the keys of each KEY_N consecutive non-empty-key tokens ->
    where the tokens after the latest such occurrence start (one with a token after it)."""

    def __init__(self, texts: TokenTexts, prompt: list[int]) -> None:
        self.texts = texts
        self.prompt = prompt
        self._after: dict[tuple[str, ...], int] = {}
        keys: list[str] = []
        for i, token in enumerate(prompt[:-1]):
            k = texts.key(token)
            if not k:
                continue
            keys.append(k)
            if len(keys) >= KEY_N:
                self._after[tuple(keys[-KEY_N:])] = i + 1

    def draft(self, tokens: list[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` prompt tokens after the latest prompt occurrence of the keys of
        `tokens`' last KEY_N non-empty-key tokens (within _SCAN tokens); the first without its
        leading space where `tokens` ends in an opening space or quote; after a JSON key's
        colon (`"email":`), a value that does not open with a quote in the prompt (`Email:
        ann@x.com`) gets one first (` "ann...`: JSON's strings open so); [] when none."""
        keys: list[str] = []
        for token in reversed(tokens[-_SCAN:]):
            k = self.texts.key(token)
            if k:
                keys.append(k)
                if len(keys) == KEY_N:
                    break
        start = self._after.get(tuple(reversed(keys))) if len(keys) == KEY_N else None
        if start is None or max_tokens <= 0:
            return []
        out = self.prompt[start : start + max_tokens]
        quote = self.texts.opening_quote()
        if (self.texts.text(tokens[-1]).endswith('":') and quote is not None
                and not self.texts.text(out[0]).lstrip().startswith('"')):  # fmt: skip
            out = [quote, self.texts.unspaced(out[0]), *out[1:]][:max_tokens]
        elif self.texts.opens(tokens[-1]):
            out[0] = self.texts.unspaced(out[0])
        return out
