"""ReqOutput: a client's view of one request, what it sent and the output the scheduler has
reported so far, accumulated from ReqOutMsg (the scheduler's `Req` stays in the scheduler).
`fan_out` makes the n samples of one prompt: only the first computes the prompt's logprobs."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from radixrt.core import FinishReason, PinOutcome, PinSpec, SamplingParams
from radixrt.core.messages import ReqOutMsg, TopLogprobs, finish_from_msg


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
    input_token_ranks: list[int | None] = field(default_factory=list)  # 1: the likeliest
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    # With lower KV tiers: cached_tokens per tier ("device", "host", "disk"), load seconds.
    cached_tokens_by_tier: dict[str, int] = field(default_factory=dict)
    cache_load_s: float = 0.0
    # Speculative decoding: tokens drafted for it and accepted so far, and the steps that
    # sampled for it (0: none drafted).
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_steps: int = 0
    # Of those, drafted from its predicted output, and kept (usage's prediction tokens).
    prediction_drafted: int = 0
    prediction_accepted: int = 0
    pins: list[PinOutcome] = field(default_factory=list)  # set when it finishes
    finish_reason: FinishReason | None = None
    # n > 1 with input logprobs: the sample of the same prompt that computes them (fan_out).
    # This one finishes no earlier than it, and then shares its lists.
    input_source: ReqOutput | None = None
    # Samples whose finish arrived before this one's: finished with it (their reasons).
    _waiting: list[tuple[ReqOutput, FinishReason]] = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def spec_tokens_per_step(self, num_out: int | None = None) -> float | None:
        """Speculation's speed-up for this request in steps: output tokens (`num_out`, else
        all so far) per step that sampled for it, forced grammar tokens counted as they would
        be without; None when nothing was drafted for it (one token per step)."""
        if not self.spec_drafted:
            return None
        return (len(self.output_ids) if num_out is None else num_out) / max(self.spec_steps, 1)

    def apply(self, out: ReqOutMsg) -> list[ReqOutput]:
        """Add one step's output (tokens and logprobs gained since the last message); the
        requests it finished: none, this one, and the samples that waited on it."""
        self.output_ids.extend(out.new_ids)
        self.output_logprobs.extend(out.new_logprobs)
        self.output_top_logprobs.extend(out.new_top_logprobs)
        self.cached_tokens = out.cached_tokens
        if out.cached_tokens_by_tier:
            self.cached_tokens_by_tier, self.cache_load_s = (
                out.cached_tokens_by_tier,
                out.cache_load_s,
            )
        if out.spec_drafted:
            self.spec_drafted, self.spec_accepted = out.spec_drafted, out.spec_accepted
            self.spec_steps = out.spec_steps
            self.prediction_drafted = out.prediction_drafted
            self.prediction_accepted = out.prediction_accepted
        if out.finish is None:
            return []
        self.pins = list(out.pins)
        reason = finish_from_msg(out.finish)
        source = self.input_source
        if source is None:
            self.input_logprobs = list(out.input_logprobs)
            self.input_top_logprobs = list(out.input_top_logprobs)
            self.input_token_ranks = list(out.input_token_ranks)
        elif not source.is_finished:
            source._waiting.append((self, reason))  # the prompt's logprobs are not in yet
            return []
        self.finish(reason)
        return [self, *self.release()]

    def finish(self, reason: FinishReason | None) -> None:
        """Record the finish reason (the first one wins); a sample that shares another's
        input logprobs takes them now (the lists, not copies: they no longer change)."""
        if self.finish_reason is not None:
            return
        source = self.input_source
        if source is not None:
            self.input_logprobs = source.input_logprobs
            self.input_top_logprobs = source.input_top_logprobs
            self.input_token_ranks = source.input_token_ranks
        self.finish_reason = reason

    def release(self) -> list[ReqOutput]:
        """Finish the samples that waited on this one's input logprobs (once it finished)."""
        waiting, self._waiting = self._waiting, []
        for other, reason in waiting:
            other.finish(reason)
        return [other for other, _ in waiting]


def fan_out(
    ids: list[int], sp: SamplingParams, now: float, caller: str = "", endpoint: str = "",
    pins: list[PinSpec] | None = None,
) -> list[tuple[ReqOutput, SamplingParams]]:  # fmt: skip
    """The n samples of one prompt: each one's ReqOutput (the client's parameters) and the
    parameters the scheduler gets. Input logprobs are computed by the first sample only: the
    others are sent without them (their prompt then comes from the prefix cache) and share
    the first's when it finishes (ReqOutput.input_source)."""
    out: list[tuple[ReqOutput, SamplingParams]] = []
    first: ReqOutput | None = None
    for sub in sp.samples():
        req = ReqOutput(uuid.uuid4().hex, ids, sub, now, caller, endpoint, list(pins or ()))
        sent = sub
        if first is not None and sub.return_logprob and sub.logprob_start_len >= 0:
            req.input_source = first
            sent = sub.replace(logprob_start_len=-1)
        first = first or req
        out.append((req, sent))
    return out
