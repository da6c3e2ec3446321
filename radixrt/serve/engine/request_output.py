"""RequestOutput: what the Engine hands back for one request, in the server's response shape."""

from __future__ import annotations

import queue
from typing import Any

from radixrt.serve.results.detokenizer import IncrementalDetokenizer
from radixrt.serve.results.result import build_result
from radixrt.serve.results.state import ReqOutput


class RequestOutput:
    """Follows one request; `result()` gives {text, output_ids, meta_info} as of now.

    `updates` receives False after each new token, True once finished, or an exception.
    Only the scheduler thread mutates `state`; readers copy lists before use.
    """

    def __init__(self, state: ReqOutput, tokenizer: Any) -> None:
        self.state = state
        self.detok = IncrementalDetokenizer.for_params(tokenizer, state.sampling_params)
        self.updates: queue.Queue[bool | BaseException] = queue.Queue()

    def result(self) -> dict[str, Any]:
        return build_result(self.state, self.detok)
