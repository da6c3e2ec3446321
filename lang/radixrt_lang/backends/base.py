"""The frontend backend interface: where a program's requests go."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from radixrt_lang.chat_template import ChatTemplate, Message
from radixrt_lang.errors import BackendError, NotSupportedError

Result = dict[str, Any]  # {text, output_ids, meta_info}: the runtime's /generate result shape
Prompts = list[str] | list[list[int]]  # texts, or token-id lists

_REGEX_PROBE = "QQQ"


class BaseBackend(ABC):
    """A model behind the runtime's `/generate` contract.

    Every method may be called from many program threads at once and must be thread-safe.
    Methods raise BackendError carrying the backend's own message when a request is refused
    or fails, and NotSupportedError when the backend cannot do it at all. Nothing here
    mutates program state; results are fresh dicts the caller owns.
    """

    can_score: bool = True  # prompt-token logprobs with max_new_tokens 0 (needed by select)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chat_template: ChatTemplate | None = None
        self._chat_template_loaded = False  # None is a valid answer: messages taken natively
        self._supports_regex: bool | None = None

    @abstractmethod
    def generate(self, prompts: Prompts, params: dict[str, Any]) -> list[Result]:
        """One result per prompt (text or token ids, never empty), in order.

        `params` is a sampling-params dict applied to every prompt; it may hold
        `return_logprob`, `logprob_start_len` and `top_logprobs_num`. `max_new_tokens: 0`
        computes (and caches) the prompt only. Blocks until all are finished."""

    @abstractmethod
    def generate_stream(self, prompt: str, params: dict[str, Any]) -> Iterator[Result]:
        """Cumulative results for one prompt as tokens arrive; the last one is final."""

    @abstractmethod
    def _load_chat_template(self) -> ChatTemplate | None:
        """The model's chat template (None: the backend takes messages natively, see chat)."""

    def chat_template(self) -> ChatTemplate | None:
        """The model's chat template, fetched once."""
        with self._lock:
            if not self._chat_template_loaded:
                self._chat_template = self._load_chat_template()
                self._chat_template_loaded = True
            return self._chat_template

    def chat(self, messages: list[Message], params: dict[str, Any]) -> Result:
        """Generate the next assistant message; only backends whose chat_template() is None."""
        raise NotSupportedError(f"chat messages are not supported by {type(self).__name__}")

    def cache_prefix(self, text: str) -> Result | None:
        """Compute `text` once so that later requests starting with it hit the prefix cache."""
        if not text:
            return None
        return self.generate([text], {"max_new_tokens": 0})[0]

    def flush_cache(self) -> bool:
        """Drop the backend's prefix cache; False when it could not (requests running)."""
        return False

    @property
    def supports_regex(self) -> bool:
        """Whether `regex`/`json_schema` are enforced, found once by a tiny probe request.

        The probe asks for text matching a regex a model would not write unprompted; a
        backend that refuses it, or accepts it but returns other text, does not enforce."""
        with self._lock:
            known = self._supports_regex
        if known is None:
            try:
                out = self.generate(
                    ["Reply:"], {"max_new_tokens": 3, "temperature": 0, "regex": _REGEX_PROBE}
                )[0]
                known = bool(out["text"]) and _REGEX_PROBE.startswith(out["text"])
            except BackendError:
                known = False
            with self._lock:
                self._supports_regex = known
        return known


def check_results(results: list[Result]) -> list[Result]:
    """Raise BackendError for a request the runtime aborted (rejected, too long, ...)."""
    for r in results:
        reason = (r.get("meta_info") or {}).get("finish_reason") or {}
        if reason.get("type") == "abort":
            raise BackendError(reason.get("message") or "the request was aborted")
    return results
