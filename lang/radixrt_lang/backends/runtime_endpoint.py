"""RuntimeEndpoint: the radixrt HTTP server (`/generate`, `/get_model_info`, `/flush_cache`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt_lang.backends.base import BaseBackend, Prompts, Result, check_results
from radixrt_lang.backends.http import HttpClient
from radixrt_lang.chat_template import ChatTemplate
from radixrt_lang.errors import BackendError

# meta_info lists that a /generate stream event holds only the new entries of
INCREMENTAL_META = ("output_token_logprobs", "output_top_logprobs")


class RuntimeEndpoint(BaseBackend):
    """A radixrt server at `url` (e.g. "http://127.0.0.1:30000"); `api_key` if it needs one."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout: float = 600.0,
        cache_salt: str | None = None,
    ) -> None:
        """`cache_salt`: a prefix-cache namespace of this client's own on the server (requests
        with another salt, or none, never share its cached prefixes)."""
        super().__init__()
        self.url = url.rstrip("/")
        self.http = HttpClient(self.url, api_key, timeout)
        self.cache_salt = cache_salt
        self._model_info: dict[str, Any] | None = None

    def _body(self, **fields: Any) -> dict[str, Any]:
        if self.cache_salt is not None:
            fields["cache_salt"] = self.cache_salt
        return fields

    def generate(self, prompts: Prompts, params: dict[str, Any]) -> list[Result]:
        key = "text" if isinstance(prompts[0], str) else "input_ids"
        out = self.http.post(
            "/generate", self._body(**{key: list(prompts)}, sampling_params=params)
        )
        if not isinstance(out, list) or len(out) != len(prompts):
            raise BackendError(
                f"/generate returned {type(out).__name__}, expected a list of "
                f"{len(prompts)} results"
            )
        return check_results(out)

    def generate_stream(self, prompt: str, params: dict[str, Any]) -> Iterator[Result]:
        """Cumulative results, as the Engine's: the server's events carry only the new tokens
        and logprobs (their text is whole), gathered here."""
        events = self.http.post_events(
            "/generate", self._body(text=prompt, sampling_params=params, stream=True)
        )
        ids: list[int] = []
        gathered: dict[str, list[Any]] = {}
        for event in events:
            ids.extend(event.get("output_ids") or ())
            meta = dict(event.get("meta_info") or {})
            for key in INCREMENTAL_META:
                if key in meta:
                    gathered.setdefault(key, []).extend(meta[key])
                    meta[key] = list(gathered[key])
            yield {**event, "output_ids": list(ids), "meta_info": meta}

    def get_model_info(self) -> dict[str, Any]:
        if self._model_info is None:
            self._model_info = self.http.get("/get_model_info")
        return self._model_info

    def get_server_info(self) -> dict[str, Any]:
        return self.http.get("/get_server_info")

    def flush_cache(self) -> bool:
        try:
            return bool(self.http.post("/flush_cache", {}).get("success", False))
        except BackendError as e:
            if e.status == 409:  # requests are running
                return False
            raise

    def _load_chat_template(self) -> ChatTemplate:
        info = self.get_model_info()
        source = info.get("chat_template")
        if not source:
            raise BackendError(f"the model at {self.url} has no chat template; roles need one")
        return ChatTemplate.from_jinja(
            source, info.get("bos_token") or "", info.get("eos_token") or ""
        )

    def __repr__(self) -> str:
        return f"RuntimeEndpoint({self.url!r})"
