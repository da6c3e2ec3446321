"""radixrt's frontend language: programs that interleave Python with generation.

Never imports torch or the runtime: it talks to a server over HTTP, or to an in-process
Engine through a duck-typed adapter.
"""

from radixrt.lang.api import (
    assistant,
    gen,
    gen_int,
    gen_string,
    select,
    system,
    tool_call,
    user,
)
from radixrt.lang.backends import BaseBackend, OpenAICompatible, RuntimeEndpoint
from radixrt.lang.choices import (
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixrt.lang.errors import BackendError, NotSupportedError, OutputParseError, ProgramError
from radixrt.lang.ir import SamplingParams
from radixrt.lang.program import Program, function, get_default_backend, set_default_backend
from radixrt.lang.stable import stable_json
from radixrt.lang.state import ProgramState, ProgramStateGroup
from radixrt.lang.tools import run_call, tool_spec

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
