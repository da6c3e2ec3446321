"""ReqOutput: a client's view of one request, what it sent and the output the scheduler has
reported so far, accumulated from ReqOutMsg (the scheduler's `Req` stays in the scheduler)."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixrt.core import FinishReason, PinOutcome, PinSpec, SamplingParams
from radixrt.messages import ReqOutMsg, TopLogprobs, finish_from_msg


@dataclass(slots=True, eq=False)
class ReqOutput:
    """One request (one sample) as its client sees it.

    Only `apply` and `finish` mutate it, on the one thread that receives the scheduler's
    outputs; the lists only grow, so readers on other threads copy them before use.
    """

    rid: str  # the scheduler's id
    input_ids: list[int]
    sampling_params: SamplingParams  # n == 1
    arrival_time: float  # time.monotonic() at submission
    caller: str = ""  # who sent it (the HTTP side's caller_of: a tenant, a key's digest, ...)
    endpoint: str = ""  # the HTTP path it came in on
    pin_specs: list[PinSpec] = field(default_factory=list)  # the prefixes it asked to pin
    first_token_time: float | None = None  # time.monotonic() when its first token arrived
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top_logprobs: list[TopLogprobs] = field(default_factory=list)
    # Prompt-token logprobs (from logprob_start_len), filled in when the request finishes.
    input_logprobs: list[float | None] = field(default_factory=list)
    input_top_logprobs: list[TopLogprobs | None] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    # With lower KV tiers: cached_tokens per tier ("device", "host", "disk"), load seconds.
    cached_tokens_by_tier: dict[str, int] = field(default_factory=dict)
    cache_load_s: float = 0.0
    pins: list[PinOutcome] = field(default_factory=list)  # set when it finishes
    finish_reason: FinishReason | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def apply(self, out: ReqOutMsg) -> None:
        """Add one step's output (tokens and logprobs gained since the last message)."""
        self.output_ids.extend(out.new_ids)
        self.output_logprobs.extend(out.new_logprobs)
        self.output_top_logprobs.extend(out.new_top_logprobs)
        self.cached_tokens = out.cached_tokens
        if out.cached_tokens_by_tier:
            self.cached_tokens_by_tier, self.cache_load_s = (
                out.cached_tokens_by_tier,
                out.cache_load_s,
            )
        if out.finish is not None:
            self.input_logprobs = list(out.input_logprobs)
            self.input_top_logprobs = list(out.input_top_logprobs)
            self.pins = list(out.pins)
            self.finish(finish_from_msg(out.finish))

    def finish(self, reason: FinishReason | None) -> None:
        """Record the finish reason (the first one wins)."""
        if self.finish_reason is None:
            self.finish_reason = reason
