"""EngineBackend: an in-process radixrt Engine as a frontend backend (no HTTP); the runtime's
part of the language, registered with the frontend's `as_backend` when `radixrt` is imported.

Duck-typed: anything with the Engine's `generate(prompt=..., sampling_params=...,
input_ids=..., stream=...)` and a Hugging Face `tokenizer` works. Nothing of the runtime is
imported here, so `import radixrt` stays free of torch until the caller makes an Engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt_lang.backends.base import BaseBackend, Prompts, Result, check_results
from radixrt_lang.chat_template import ChatTemplate
from radixrt_lang.errors import BackendError


class EngineBackend(BaseBackend):
    """Adapter from the Engine API to the backend contract; the Engine's ValueErrors (invalid
    parameters, prompts that do not fit) become BackendErrors with the same message."""

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.engine = engine

    @staticmethod
    def accepts(obj: Any) -> bool:
        return callable(getattr(obj, "generate", None)) and hasattr(obj, "tokenizer")

    def generate(self, prompts: Prompts, params: dict[str, Any]) -> list[Result]:
        key = "prompt" if isinstance(prompts[0], str) else "input_ids"
        try:
            out = self.engine.generate(**{key: list(prompts)}, sampling_params=params)
        except ValueError as e:
            raise BackendError(str(e)) from None
        return check_results(out)

    def generate_stream(self, prompt: str, params: dict[str, Any]) -> Iterator[Result]:
        try:
            stream = self.engine.generate(prompt, params, stream=True)
        except ValueError as e:
            raise BackendError(str(e)) from None
        for chunk in stream:
            yield check_results([chunk])[0]

    def flush_cache(self) -> bool:
        return bool(self.engine.flush_cache())

    def _load_chat_template(self) -> ChatTemplate:
        if not getattr(self.engine.tokenizer, "chat_template", None):
            raise BackendError("the engine's model has no chat template; roles need one")
        return ChatTemplate.from_tokenizer(self.engine.tokenizer)

    def __repr__(self) -> str:
        return f"EngineBackend({self.engine!r})"
