"""A scripted in-memory backend for the language's unit tests (no model, no torch)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from radixrt_lang.backends.base import BaseBackend, Prompts, Result
from radixrt_lang.chat_template import ChatTemplate
from radixrt_lang.errors import BackendError

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)
VOCAB = ["ab", "the", "\n", *[chr(c) for c in range(32, 127)]]


def tokenize(text: str) -> list[int]:
    """Longest match over VOCAB, so "a" + "b" merges into one token "ab"."""
    ids, i = [], 0
    while i < len(text):
        tok = max((v for v in VOCAB if text.startswith(v, i)), key=len)
        ids.append(VOCAB.index(tok))
        i += len(tok)
    return ids


def token_logprob(token_id: int) -> float:
    """Deterministic fake logprob: letters later in the alphabet are less likely."""
    return -0.1 * (token_id % 17) - 0.05


class FakeBackend(BaseBackend):
    """Answers gens with `reply(prompt, params)`; scores prompts with token_logprob; counts a
    prompt's tokens as cached when an earlier prompt shared them."""

    def __init__(
        self, reply: Callable[[str, dict[str, Any]], str] | None = None, regex: bool = False
    ) -> None:
        super().__init__()
        self.reply = reply or (lambda prompt, params: "ok")
        self._supports_regex = regex
        self.calls: list[tuple[Prompts, dict[str, Any]]] = []
        self.seen: list[list[int]] = []
        self.mutex = threading.Lock()

    def generate(self, prompts: Prompts, params: dict[str, Any]) -> list[Result]:
        with self.mutex:
            self.calls.append((list(prompts), dict(params)))
        return [self._one(p, params) for p in prompts]

    def generate_stream(self, prompt: str, params: dict[str, Any]) -> Iterator[Result]:
        full = self._one(prompt, params)
        for i in range(1, len(full["text"]) + 1):
            yield {**full, "text": full["text"][:i]}

    def _load_chat_template(self) -> ChatTemplate:
        return ChatTemplate.from_jinja(CHATML)

    def _one(self, prompt: str | list[int], params: dict[str, Any]) -> Result:
        if params.get("temperature", 0) < 0:
            raise BackendError("invalid sampling parameter temperature=-1: must be >= 0", 400)
        ids = tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        with self.mutex:
            cached = max((_common(ids, s) for s in self.seen), default=0)
            self.seen.append(ids)
        text = "" if params.get("max_new_tokens") == 0 else self.reply(str(prompt), params)
        for stop in params.get("stop", []):
            text = text.split(stop)[0]
        meta: dict[str, Any] = {
            "prompt_tokens": len(ids),
            "cached_tokens": min(cached, len(ids) - 1),
            "completion_tokens": len(tokenize(text)),
            "finish_reason": {"type": "stop"},
        }
        start = params.get("logprob_start_len", -1)
        if params.get("return_logprob") and start >= 0:
            meta["input_token_logprobs"] = [
                (None if i == 0 else token_logprob(t), t, None) for i, t in enumerate(ids)
            ][start:]
        return {"text": text, "output_ids": tokenize(text), "meta_info": meta}


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
