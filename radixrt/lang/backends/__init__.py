"""Frontend backends; `as_backend` turns what a user passes (a backend or an Engine) into one."""

from __future__ import annotations

import weakref
from typing import Any

from radixrt.lang.backends.base import BaseBackend
from radixrt.lang.backends.openai_compat import OpenAICompatible
from radixrt.lang.backends.runtime_endpoint import RuntimeEndpoint

__all__ = ["BaseBackend", "OpenAICompatible", "RuntimeEndpoint", "as_backend"]

_adapters: weakref.WeakKeyDictionary[Any, BaseBackend] = weakref.WeakKeyDictionary()


def as_backend(obj: Any) -> BaseBackend:
    """A BaseBackend as is; an Engine (anything with `.generate` and `.tokenizer`) wrapped in
    the EngineBackend adapter (cached on the engine, so its chat template is read once)."""
    if isinstance(obj, BaseBackend):
        return obj
    from radixrt.lang.backends.engine import EngineBackend

    if EngineBackend.accepts(obj):
        if obj not in _adapters:
            _adapters[obj] = EngineBackend(obj)
        return _adapters[obj]
    raise TypeError(
        f"{type(obj).__name__} is not a backend: pass RuntimeEndpoint(url), "
        "OpenAICompatible(base_url, model) or an Engine"
    )
