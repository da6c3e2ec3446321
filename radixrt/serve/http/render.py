"""The output half of an API dialect: `BaseRender` turns one HTTP call's typed output deltas
into its wire format, streamed or whole. The serving pipeline (serving.py) decides when each
method is called; a render decides only what the bytes are."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from radixrt.serve.http.diagnostics import Diagnosis
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.results.delta import OutputDelta

Explained = dict[tuple[int, ...], dict[str, Any]]  # a prompt's ids -> why it missed the cache


@dataclass(frozen=True, slots=True)
class Finished:
    """One HTTP call whose requests all finished: their states (prompt-major, n samples per
    prompt), each one's whole output as one delta, and the cache explanation of each distinct
    prompt when the call asked for it."""

    states: list[ReqState]
    outputs: list[OutputDelta]
    explained: Explained | None = None


class BaseRender(ABC):
    """One HTTP call's answer in one dialect's shape; made by the dialect per call, used once.

    Whole answers: `response` once every request finished (it may raise an error the app's
    handlers answer in the dialect's shape). Streams: `head`, then `delta` for each new
    output of request `index` (in the order outputs arrive), then `tail` once all finished;
    a failure after the head replaces the rest with one `error`; `close` ends the stream
    however it went, unless the client went away. Nothing here sends, waits or aborts.
    """

    media_type = "text/event-stream"  # of a stream
    # True: a delta for every new token, even when its text is held back (the native stream,
    # whose events count tokens); False: only once there is new text or the finish.
    every_token = False
    # Set by the pipeline before any output when the call asked to compare its prompt with an
    # earlier response's (diagnostics/compare.py); None: not asked.
    diagnosis: Diagnosis | None = None

    @abstractmethod
    def response(self, done: Finished) -> Response | dict[str, Any]:
        """The whole answer (a dict is sent as JSON with status 200)."""

    def head(self, states: list[ReqState]) -> Iterable[bytes]:
        """Events before any output."""
        return ()

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterable[bytes]:
        """The events for what request `index` (states[index]) gained."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def tail(self, states: list[ReqState]) -> Iterable[bytes]:
        """Events after every request finished (usage, stop events)."""
        return ()

    def error(self, message: str, status: int) -> bytes:
        """The event that ends a failed stream."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def close(self) -> Iterable[bytes]:
        """The last bytes of a stream, after its tail or its error ([DONE], a closing bracket)."""
        return ()
