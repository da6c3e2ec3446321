"""What every dialect's routes are built with (`add_routes(app, ctx)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixrt.serve.http.args import ServerArgs
from radixrt.serve.http.cache_handles import CacheRegistry
from radixrt.serve.http.protocol import Limits
from radixrt.serve.http.serving import ServingPipeline
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.http.tools import CallFormat
from radixrt.serve.http.tools.formats import HERMES


@dataclass(frozen=True)
class ApiContext:
    """`tm`: the TokenizerManager or the --dp dispatcher (tokenizer thread, queries);
    `pipeline`: the only way a dialect submits requests."""

    tm: Any
    args: ServerArgs
    limits: Limits
    tenancy: Tenancy
    registry: CacheRegistry  # named, pinned prefixes (/v1/caches, Gemini's cachedContents)
    pipeline: ServingPipeline
    model_name: str
    tool_format: CallFormat = HERMES  # how this model writes tool calls (--tool-call-format)

    @property
    def tokenizer(self) -> Any:
        return self.tm.tokenizer
