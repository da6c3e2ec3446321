"""radixrt: an LLM serving runtime with a token-granular radix KV cache.

`import radixrt` is light: torch is imported only when an Engine or model is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from radixrt.core import FinishKind, FinishReason, SamplingParams

if TYPE_CHECKING:
    from radixrt.engine import Engine

__version__ = "0.1.0"
__all__ = ["Engine", "FinishKind", "FinishReason", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from radixrt.engine import Engine

        return Engine
    raise AttributeError(f"module 'radixrt' has no attribute {name!r}")
