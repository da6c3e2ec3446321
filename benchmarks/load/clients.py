"""Streaming clients of the serving benchmark: radixrt's /generate and OpenAI /v1/completions.

Each `send` streams one greedy request and fills a RequestRecord (chunk arrival times, token
counts, cached tokens when the server reports them); errors are recorded, never raised.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

import httpx

from benchmarks.load.metrics import RequestRecord

BACKENDS = ("radixrt", "openai")


class BaseClient(ABC):
    """Sends one streamed request; `extra` is merged into every request body."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, extra: dict[str, Any]) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.extra = extra

    @abstractmethod
    async def send(self, prompt: str, output_len: int, record: RequestRecord) -> None:
        """Stream `prompt` -> output_len greedy tokens (EOS ignored) into `record`."""

    async def flush_cache(self) -> bool:
        """Ask the server to drop its prefix cache; False when it has no such endpoint."""
        try:
            r = await self.http.post(self.base_url + "/flush_cache")
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    async def _events(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of an SSE response; an HTTP error raises RuntimeError."""
        async with self.http.stream("POST", self.base_url + path, json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                raise RuntimeError(f"HTTP {resp.status_code}: {text[:300]}")
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(str(event["error"])[:300])
                yield event


class RadixrtClient(BaseClient):
    """POST /generate with stream on: each event holds the cumulative result."""

    async def send(self, prompt: str, output_len: int, record: RequestRecord) -> None:
        body = {
            "text": prompt,
            "stream": True,
            **self.extra,
            "sampling_params": {
                "max_new_tokens": output_len,
                "temperature": 0.0,
                "ignore_eos": True,
                **self.extra.get("sampling_params", {}),
            },
        }
        try:
            async for event in self._events("/generate", body):
                meta = event["meta_info"]
                if meta["completion_tokens"] > record.output_tokens:
                    record.chunk_times.append(time.perf_counter())
                record.output_tokens = meta["completion_tokens"]
                record.prompt_tokens = meta["prompt_tokens"]
                record.cached_tokens = meta.get("cached_tokens")
                record.text = event["text"]
        except (httpx.HTTPError, RuntimeError, KeyError, ValueError) as e:
            record.error = f"{type(e).__name__}: {e}"
        record.end = time.perf_counter()


class OpenAIClient(BaseClient):
    """POST /v1/completions with stream on; usage (and cached tokens) from the last chunk when
    the server sends it, else one token per chunk."""

    def __init__(
        self, http: httpx.AsyncClient, base_url: str, extra: dict[str, Any], model: str
    ) -> None:
        super().__init__(http, base_url.removesuffix("/v1"), extra)
        self.model = model

    async def send(self, prompt: str, output_len: int, record: RequestRecord) -> None:
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": output_len,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.extra,
        }
        chunks = 0
        usage: dict[str, Any] | None = None
        try:
            async for event in self._events("/v1/completions", body):
                choices = event.get("choices") or []
                if choices and (choices[0].get("text") or choices[0].get("finish_reason") is None):
                    record.chunk_times.append(time.perf_counter())
                    record.text += choices[0].get("text") or ""
                    chunks += 1
                usage = event.get("usage") or usage
        except (httpx.HTTPError, RuntimeError, KeyError, ValueError) as e:
            record.error = f"{type(e).__name__}: {e}"
        record.end = time.perf_counter()
        record.output_tokens = (usage or {}).get("completion_tokens") or chunks
        record.prompt_tokens = (usage or {}).get("prompt_tokens") or 0
        details = (usage or {}).get("prompt_tokens_details") or {}
        record.cached_tokens = details.get("cached_tokens")


async def make_client(
    backend: str,
    http: httpx.AsyncClient,
    base_url: str,
    extra: dict[str, Any],
    model: str | None = None,
) -> BaseClient:
    """The client for `backend`; the OpenAI model name is asked from /v1/models when not given."""
    if backend == "radixrt":
        return RadixrtClient(http, base_url, extra)
    if backend != "openai":
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if model is None:
        root = base_url.rstrip("/").removesuffix("/v1")
        r = await http.get(root + "/v1/models")
        r.raise_for_status()
        model = r.json()["data"][0]["id"]
    return OpenAIClient(http, base_url, extra, model)
