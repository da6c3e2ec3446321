"""Frontend backends; `as_backend` turns what a user passes (a backend, or an object an
adapter registered by the runtime accepts, such as radixrt's Engine) into one."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from radixrt_lang.backends.base import BaseBackend
from radixrt_lang.backends.openai_compat import OpenAICompatible
from radixrt_lang.backends.runtime_endpoint import RuntimeEndpoint

__all__ = ["BaseBackend", "OpenAICompatible", "RuntimeEndpoint", "as_backend", "register_adapter"]

Accepts = Callable[[Any], bool]
_adapters: weakref.WeakKeyDictionary[Any, BaseBackend] = weakref.WeakKeyDictionary()
_kinds: list[tuple[Accepts, Callable[[Any], BaseBackend]]] = []  # registered, in order


def register_adapter(accepts: Accepts, make: Callable[[Any], BaseBackend]) -> None:
    """Let `as_backend` wrap objects `accepts` takes with `make` (once per object). The
    runtime registers its in-process Engine this way; the frontend itself knows none."""
    if all(a is not accepts for a, _ in _kinds):
        _kinds.append((accepts, make))


def as_backend(obj: Any) -> BaseBackend:
    """A BaseBackend as is; an object a registered adapter accepts (radixrt's Engine once
    `radixrt` is imported) wrapped in it, cached on the object, so its chat template is read
    once."""
    if isinstance(obj, BaseBackend):
        return obj
    for accepts, make in _kinds:
        if accepts(obj):
            if obj not in _adapters:
                _adapters[obj] = make(obj)
            return _adapters[obj]
    raise TypeError(
        f"{type(obj).__name__} is not a backend: pass RuntimeEndpoint(url), "
        "OpenAICompatible(base_url, model) or an Engine"
    )
