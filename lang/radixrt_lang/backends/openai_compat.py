"""OpenAICompatible: any server with `/v1/completions` and `/v1/chat/completions`.

Plain text goes to /v1/completions; a program that uses roles goes to /v1/chat/completions
with its messages (the server applies its own template), so a `gen` in a role must be the
whole of an assistant message. The OpenAI API has no prompt scoring, regex or JSON-schema
decoding in common, so `select`, `regex` and `json_schema` raise NotSupportedError. A gen's
`prediction` goes with chat requests (OpenAI's predicted output, a speed hint); plain-text
gens leave it out, as /v1/completions has no such field in OpenAI's API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt_lang.backends.base import BaseBackend, Prompts, Result
from radixrt_lang.backends.http import HttpClient
from radixrt_lang.chat_template import ChatTemplate, Message
from radixrt_lang.errors import NotSupportedError

# /generate sampling names -> OpenAI request fields (the last six are common extensions).
_FIELDS = {
    "max_new_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "stop": "stop",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "logit_bias": "logit_bias",
    "allowed_token_ids": "allowed_token_ids",  # vLLM's and radixrt's
    "top_k": "top_k",
    "min_p": "min_p",
    "min_new_tokens": "min_tokens",
    "stop_token_ids": "stop_token_ids",
    "ignore_eos": "ignore_eos",
    "repetition_penalty": "repetition_penalty",
}
_UNSUPPORTED = {
    "regex": "regex",
    "json_schema": "json_schema",
    "return_logprob": "logprobs",
    "logprob_start_len": "prompt scoring (select)",
    "top_logprobs_num": "logprobs",
}


class OpenAICompatible(BaseBackend):
    """`model` on the OpenAI-compatible server at `base_url` (e.g. "http://host:8000/v1")."""

    can_score = False

    def __init__(
        self, base_url: str, model: str, api_key: str | None = None, timeout: float = 600.0
    ) -> None:
        super().__init__()
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model = model
        self.http = HttpClient(self.base_url, api_key, timeout)
        self._supports_regex = False

    def generate(self, prompts: Prompts, params: dict[str, Any]) -> list[Result]:
        body = self._body(params)
        if body.get("max_tokens") == 0:
            raise NotSupportedError(
                "prompt caching and scoring (max_new_tokens 0) are not "
                "supported by this backend (OpenAICompatible)"
            )
        return [
            self._result(self.http.post("/completions", {**body, "prompt": p}), "text")
            for p in prompts
        ]

    def generate_stream(self, prompt: str, params: dict[str, Any]) -> Iterator[Result]:
        body = {**self._body(params), "prompt": prompt, "stream": True}
        text = ""
        for event in self.http.post_events("/completions", body):
            choice = event["choices"][0]
            text += choice.get("text") or ""
            yield {
                "text": text,
                "output_ids": [],
                "meta_info": {"finish_reason": _finish(choice.get("finish_reason"))},
            }

    def chat(self, messages: list[Message], params: dict[str, Any]) -> Result:
        body = {**self._body(params), "messages": messages}
        if params.get("prediction"):  # OpenAI's predicted output (chat completions only)
            body["prediction"] = {"type": "content", "content": params["prediction"]}
        return self._result(self.http.post("/chat/completions", body), "message")

    def cache_prefix(self, text: str) -> None:
        return None  # no portable way to prefill; the server's own prefix cache still helps

    def _load_chat_template(self) -> ChatTemplate | None:
        return None

    def _body(self, params: dict[str, Any]) -> dict[str, Any]:
        for key, what in _UNSUPPORTED.items():
            if params.get(key) not in (None, False, 0, -1):
                raise NotSupportedError(
                    f"{what} is not supported by this backend (OpenAICompatible at {self.base_url})"
                )
        body: dict[str, Any] = {"model": self.model}
        body.update({_FIELDS[k]: v for k, v in params.items() if k in _FIELDS})
        return body

    @staticmethod
    def _result(resp: dict[str, Any], kind: str) -> Result:
        choice = resp["choices"][0]
        text = choice["message"]["content"] if kind == "message" else choice["text"]
        usage = resp.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        meta = {
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "cached_tokens": cached,
            "finish_reason": _finish(choice.get("finish_reason")),
        }
        details = usage.get("completion_tokens_details") or {}
        if "accepted_prediction_tokens" in details:  # a predicted output's use, as native
            meta["prediction_accepted_tokens"] = details["accepted_prediction_tokens"]
            meta["prediction_rejected_tokens"] = details.get("rejected_prediction_tokens", 0)
        return {"text": text or "", "output_ids": [], "meta_info": meta}

    def __repr__(self) -> str:
        return f"OpenAICompatible({self.base_url!r}, {self.model!r})"


def _finish(reason: str | None) -> dict[str, Any] | None:
    return None if reason is None else {"type": reason}
