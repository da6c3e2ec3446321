"""Role markers from the model's own chat template: what `s.user()` etc. put around content.

The template is rendered with a sentinel as the new message's content, after the
conversation so far; the text before the sentinel is the role's prefix, the rest its suffix.
So the prefix carries whatever the template adds for that position (a default system prompt
before the first user turn, a BOS token), exactly as the template would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SENTINEL = "<<radixrt-lang-content>>"

Message = dict[str, str]


class ChatTemplate:
    """Wraps `render(messages) -> str` (no generation prompt) and cuts role markers from it."""

    def __init__(self, render: Callable[[list[Message]], str]) -> None:
        self.render = render

    @classmethod
    def from_jinja(cls, source: str, bos_token: str = "", eos_token: str = "") -> ChatTemplate:
        """Render a Hugging Face Jinja chat template (as /get_model_info returns it)."""
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        template = env.from_string(source)

        def render(messages: list[Message]) -> str:
            return template.render(
                messages=messages,
                bos_token=bos_token,
                eos_token=eos_token,
                add_generation_prompt=False,
            )

        return cls(render)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ChatTemplate:
        """Use a Hugging Face tokenizer's `apply_chat_template` (the Engine's tokenizer)."""

        def render(messages: list[Message]) -> str:
            return tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=False
            )

        return cls(render)

    def role_parts(self, history: list[Message], role: str) -> tuple[str, str]:
        """(prefix, suffix) of a `role` message that follows `history`."""
        base = self.render(history) if history else ""
        full = self.render([*history, {"role": role, "content": SENTINEL}])
        if not full.startswith(base):  # the template re-renders earlier turns differently
            base = _common_prefix(base, full)
        prefix, found, suffix = full[len(base) :].partition(SENTINEL)
        if not found:
            raise ValueError(f"the chat template drops the content of {role!r} messages")
        return prefix, suffix


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]
