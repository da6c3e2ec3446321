"""radixrt: an LLM serving runtime with a token-granular radix KV cache.

`import radixrt` is light: torch is imported only when an Engine or model is made. The
frontend language (`lang/`) is re-exported here: `rt.function`, `rt.gen`, `rt.select`, ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import radixrt.lang as lang
from radixrt.core import FinishKind as FinishKind
from radixrt.core import FinishReason as FinishReason
from radixrt.core import SamplingParams as _RuntimeSamplingParams
from radixrt.lang import *  # noqa: F403 - the language's public names, listed in lang.__all__

SamplingParams = _RuntimeSamplingParams  # the runtime's, not the one the star import brings

if TYPE_CHECKING:
    from radixrt.serve.engine import Engine as Engine

__version__ = "0.1.0"
_RUNTIME_NAMES = ["Engine", "FinishKind", "FinishReason", "SamplingParams", "__version__"]
__all__ = sorted({*lang.__all__, *_RUNTIME_NAMES})


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from radixrt.serve.engine import Engine

        return Engine
    raise AttributeError(f"module 'radixrt' has no attribute {name!r}")
