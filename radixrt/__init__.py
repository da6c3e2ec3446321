"""radixrt: an LLM serving runtime with a token-granular radix KV cache.

`import radixrt` is light: torch is imported only when an Engine or model is made. The
frontend language (`lang/`) is re-exported here: `rt.function`, `rt.gen`, `rt.select`, ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lang import (
    BackendError,
    NotSupportedError,
    OpenAICompatible,
    OutputParseError,
    Program,
    ProgramError,
    ProgramState,
    ProgramStateGroup,
    RuntimeEndpoint,
    assistant,
    function,
    gen,
    gen_int,
    gen_string,
    get_default_backend,
    greedy_token_selection,
    select,
    set_default_backend,
    system,
    token_length_normalized,
    unconditional_likelihood_normalized,
    user,
)
from radixrt.core import FinishKind, FinishReason, SamplingParams

if TYPE_CHECKING:
    from radixrt.engine import Engine

__version__ = "0.1.0"
__all__ = [
    "BackendError",
    "Engine",
    "FinishKind",
    "FinishReason",
    "NotSupportedError",
    "OpenAICompatible",
    "OutputParseError",
    "Program",
    "ProgramError",
    "ProgramState",
    "ProgramStateGroup",
    "RuntimeEndpoint",
    "SamplingParams",
    "__version__",
    "assistant",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "get_default_backend",
    "greedy_token_selection",
    "select",
    "set_default_backend",
    "system",
    "token_length_normalized",
    "unconditional_likelihood_normalized",
    "user",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from radixrt.engine import Engine

        return Engine
    raise AttributeError(f"module 'radixrt' has no attribute {name!r}")
