"""radixrt's frontend language: programs that interleave Python with generation.

Never imports torch or the runtime: it talks to a server over HTTP, or to an in-process
Engine through a duck-typed adapter.
"""

from radixrt_lang.api import (
    assistant,
    gen,
    gen_int,
    gen_string,
    select,
    system,
    tool_call,
    user,
)
from radixrt_lang.backends import BaseBackend, OpenAICompatible, RuntimeEndpoint
from radixrt_lang.choices import (
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixrt_lang.errors import BackendError, NotSupportedError, OutputParseError, ProgramError
from radixrt_lang.ir import SamplingParams
from radixrt_lang.program import Program, function, get_default_backend, set_default_backend
from radixrt_lang.stable import stable_json
from radixrt_lang.state import ProgramState, ProgramStateGroup
from radixrt_lang.tools import run_call, tool_spec

__all__ = [
    "BackendError",
    "BaseBackend",
    "NotSupportedError",
    "OpenAICompatible",
    "OutputParseError",
    "Program",
    "ProgramError",
    "ProgramState",
    "ProgramStateGroup",
    "RuntimeEndpoint",
    "SamplingParams",
    "assistant",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "get_default_backend",
    "greedy_token_selection",
    "select",
    "set_default_backend",
    "stable_json",
    "system",
    "token_length_normalized",
    "tool_call",
    "run_call",
    "tool_spec",
    "unconditional_likelihood_normalized",
    "user",
]
