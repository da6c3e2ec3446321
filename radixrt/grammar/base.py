"""The grammar-backend interface: compile a spec once, then one matcher per request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import torch

SPEC_KINDS = ("regex", "json_schema", "ebnf")
UNREACHABLE = 2**31 - 1  # min_tokens of a position from which no output can be finished


S = TypeVar("S")
ROLLBACK_DEPTH = 128  # accepted tokens a matcher can always roll back


@dataclass(frozen=True, slots=True)
class JsonLayout:
    """The one layout constrained JSON is written in, on every backend: `item_separator`
    between array items and object members, `key_separator` between a key and its value, no
    whitespace anywhere else (free whitespace lets a sampled model spend its whole budget on
    blanks, and a backend that allowed more than another would make outputs depend on which
    one compiled the spec)."""

    item_separator: str = ", "
    key_separator: str = ": "

    def __post_init__(self) -> None:
        # Written into regexes as they are: only characters no regex treats specially.
        for text in (self.item_separator, self.key_separator):
            if text.strip(" ,:"):
                raise ValueError(f"a JSON separator holds only spaces, ',' and ':', not {text!r}")

    def guidance(self) -> dict[str, Any]:
        """As llguidance's JSON options ("x-guidance")."""
        return {
            "whitespace_flexible": False,
            "item_separator": self.item_separator,
            "key_separator": self.key_separator,
        }


CANONICAL_JSON = JsonLayout()  # `{"a": 1, "b": [2, 3]}`: response formats
COMPACT_JSON = JsonLayout(",", ":")  # `{"a":1,"b":[2,3]}`: forced tool calls


def mask_bit(i: int) -> int:
    """Bit i (0-31) of an int32 mask word as a Python int in int32 range (bit t of a mask row
    is token t: `row[t // 32] |= mask_bit(t % 32)` allows it, `&= ~mask_bit(...)` refuses)."""
    return (1 << i) - (1 << 32) if i == 31 else 1 << i


class GrammarError(ValueError):
    """A spec the backend cannot compile (or that took too long); the message says why."""


class GrammarBusyError(GrammarError):
    """Too many compiles are already queued or running; the spec itself may be fine, so the
    caller should try again later (HTTP 503, not 400)."""


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """What constrains one request: `kind` is one of SPEC_KINDS, `text` the regex, the JSON
    schema (a JSON string) or the grammar. Hashable: the compile cache is keyed by it."""

    kind: str
    text: str

    @classmethod
    def from_params(cls, params: Any) -> GrammarSpec | None:
        """The spec of a SamplingParams (at most one of its spec fields is set), or None."""
        for kind in SPEC_KINDS:
            text = getattr(params, kind, None)
            if text is not None:
                return cls(kind, text)
        return None


class BaseGrammarMatcher(ABC):
    """One request's position in its grammar. Owned by that request; not thread-safe.

    Token ids are the model's; bit t of the mask is token t. Stop (EOS) tokens are allowed
    exactly when the grammar is complete; they are never passed to `accept`.

    A matcher that `bounds_length` knows how few tokens finish the output from where it is:
    `min_tokens` is exact and `fill_mask` with a budget keeps only the tokens after which the
    output can still be finished in time, so an output whose start fits its budget always
    ends complete. Other matchers ignore the budget and return None from `min_tokens`.
    """

    bounds_length: bool = False
    # Whether a grammar shapes the output (a reasoning gate over free text only caps its
    # reasoning: a stop token there ends the output as it would without a matcher).
    constrains: bool = True
    # Whether `rollback` works (every matcher here; a backend that cannot would say False):
    # speculative decoding walks a draft through the matcher to find the masks along it,
    # then steps back.
    can_rollback: bool = True

    @abstractmethod
    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        """Write the tokens allowed next into `bitmask[row]`, a contiguous (W,) int32 CPU row
        with W = ceil(vocab_size / 32); every bit of the row is written, no other row is.
        `budget`: the tokens the output may still take, this one included (None: no limit)."""

    @abstractmethod
    def is_accepting(self) -> bool:
        """Whether the tokens accepted so far are a complete output of the grammar."""

    def min_tokens(self) -> int | None:
        """The fewest tokens that finish the output from here (0 when accepting), `UNREACHABLE`
        when nothing can, None when this backend cannot tell."""
        return None

    def stuck(self) -> bool:
        """Whether the grammar found no token to go on with although its output is not
        complete: it needs a byte that no token of the vocabulary holds (llguidance then
        allows only a stop token, which must not end the output as a complete one)."""
        return False

    @abstractmethod
    def accept(self, token_id: int) -> bool:
        """Advance past `token_id`; False if the grammar does not allow it (the matcher is then
        unusable). Never raises for a bad token."""

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last `num_tokens` accepted tokens (all of them accepted successfully;
        at most `ROLLBACK_DEPTH`)."""


class StateHistory(Generic[S]):
    """A matcher's state before each accepted token, newest last, for `rollback`: at least
    the newest ROLLBACK_DEPTH are kept (a draft is shorter)."""

    def __init__(self) -> None:
        self._before: list[S] = []

    def push(self, state: S) -> None:
        self._before.append(state)
        if len(self._before) > 2 * ROLLBACK_DEPTH:
            del self._before[:ROLLBACK_DEPTH]

    def pop(self, num_tokens: int) -> S:
        """The state before the last `num_tokens` accepted tokens (num_tokens >= 1)."""
        state = self._before[-num_tokens]
        del self._before[-num_tokens:]
        return state


class BaseGrammarBackend(ABC):
    """Compiles specs for one tokenizer. `compile` may run on any thread (one at a time per
    backend is not required); compiled grammars are immutable and shared by many matchers."""

    name: str = ""
    # The caller's time limit on one compile (GrammarCompiler sets it; None: none known). A
    # backend that can trade bounds for time (auto's unions) stays well within it.
    time_limit_s: float | None = None

    @abstractmethod
    def compile(self, spec: GrammarSpec) -> Any:
        """Compile `spec`; raise GrammarError with the backend's message if it cannot."""

    def check(self, spec: GrammarSpec) -> None:
        """Raise GrammarError if `compile(spec)` would; a backend may answer more cheaply
        than by compiling (the HTTP process checks every spec before queueing it)."""
        self.compile(spec)

    @abstractmethod
    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        """A fresh matcher at the start of a compiled grammar; cheap, never raises."""
