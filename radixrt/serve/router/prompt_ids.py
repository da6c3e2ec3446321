"""The token ids a worker will compute for a request body, as the router's `--kv-events` mode
needs them to match the workers' KV events: the workers' own tokenizer and chat template,
applied as the workers apply them (server/api/native/protocol.py, server/api/openai/protocol.py).

Best effort by design: a body the workers would refuse, or a dialect not covered here, gives
no ids, and the request is routed by load. Ids that drift from the worker's somewhere still
match up to the drift, which is all a prefix needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from radixrt.serve.http.tools import MESSAGE_ROLES


class PromptTokenizer:
    """The workers' tokenizer (a model folder with tokenizer.json and its chat template)."""

    def __init__(self, path: str) -> None:
        if not Path(path, "tokenizer.json").exists() and not Path(path, "tokenizer.model").exists():
            raise ValueError(
                f"--tokenizer-path {path!r} holds no tokenizer (the workers' model folder "
                "is needed to tokenize prompts as they do)"
            )
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)

    def ids(self, path: str, body: Any) -> list[int]:
        """The prompt's token ids for a body sent to `path`; [] when it cannot be told."""
        if not isinstance(body, dict):
            return []
        try:
            if path == "/generate":
                return self._prompt(body.get("input_ids") or body.get("text"), True)
            if path == "/v1/completions":
                return self._prompt(body.get("prompt"), True)
            if path == "/v1/chat/completions":
                return self._chat(body.get("messages"))
            if path == "/v1/messages":
                messages = body.get("messages")
                if body.get("system") is not None and isinstance(messages, list):
                    messages = [{"role": "system", "content": body["system"]}, *messages]
                return self._chat(messages)
        except Exception:  # a template that refuses the messages, a bad type: route by load
            return []
        return []

    def _prompt(self, prompt: Any, special: bool) -> list[int]:
        """A text, a list of ids, or a batch of either (routed by its first prompt)."""
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=special))
        if isinstance(prompt, list) and prompt:
            if all(type(t) is int for t in prompt):
                return list(prompt)
            return self._prompt(prompt[0], special)
        return []

    def _chat(self, messages: Any) -> list[int]:
        if not isinstance(messages, list) or not messages:
            return []
        flat = [{"role": _role(m.get("role", "")), "content": _text(m.get("content"))}
                for m in messages]  # fmt: skip
        text = self.tokenizer.apply_chat_template(flat, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _role(role: Any) -> Any:
    """The role as the workers template it (developer -> system)."""
    return MESSAGE_ROLES.get(role, role) if isinstance(role, str) else role


def _text(content: Any) -> str:
    """A message's content as text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""
