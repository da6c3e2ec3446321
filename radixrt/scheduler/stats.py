"""SchedulerStats, the scheduler's counters since start, and `guarded`, which turns a fault of
one request's own into that request's error finish instead of a failed step."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixrt.core import FinishReason, Req
from radixrt.core.step_times import StepTimes

logger = logging.getLogger("radixrt")


@dataclass(slots=True)
class SchedulerStats:
    """Counters since start: cache hit rate = cached_tokens / prompt_tokens."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    forward_passes: int = 0
    retractions: int = 0
    # Wall seconds of the steps that ran a pass: in the model's forward, and in the whole
    # step (scheduling, the forward, sampling, finish checks); the difference is the
    # scheduler's own per-step work.
    forward_time_s: float = 0.0
    step_time_s: float = 0.0
    step_times: StepTimes = field(default_factory=StepTimes)  # the same, per step, by kind
    input_logprob_rows: int = 0  # prompt positions whose logprobs were computed
    # Speculative decoding: draft tokens verified, those the model agreed with, the request
    # steps that verified a draft and the tokens those steps emitted (accepted + their own).
    spec_drafted_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_verify_steps: int = 0
    spec_emitted_tokens: int = 0
    # Draft trees (speculative/tree.py): verifications of a branched tree, their leaves in
    # all, and those whose accepted path left the first branch.
    spec_tree_steps: int = 0
    spec_tree_branches: int = 0
    spec_tree_side_accepts: int = 0
    # Drafts verified in a prompt's own pass (Speculation.plan_prompt_ends): those passes'
    # request steps, and the drafted tokens they accepted.
    spec_prompt_end_steps: int = 0
    spec_prompt_end_accepted: int = 0

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def count_pass(self, kind: str, forward_s: float, step_s: float) -> None:
        """One step that ran a forward pass of `kind` (core/step_times.py): its seconds in the
        forward and in the whole step."""
        self.forward_passes += 1
        self.forward_time_s += forward_s
        self.step_time_s += step_s
        self.step_times.observe(kind, forward_s, step_s)

    def spec_figures(self) -> dict[str, int]:
        """The speculation counters, as InfoReplyMsg names them."""
        return {"spec_drafted_tokens": self.spec_drafted_tokens,
                "spec_accepted_tokens": self.spec_accepted_tokens,
                "spec_verify_steps": self.spec_verify_steps,
                "spec_emitted_tokens": self.spec_emitted_tokens,
                "spec_tree_steps": self.spec_tree_steps,
                "spec_tree_branches": self.spec_tree_branches,
                "spec_tree_side_accepts": self.spec_tree_side_accepts,
                "spec_prompt_end_steps": self.spec_prompt_end_steps,
                "spec_prompt_end_accepted": self.spec_prompt_end_accepted}  # fmt: skip


def guarded(req: Req, what: str, fn: Callable[..., None], *args: Any) -> None:
    """Run fn(*args), a step of `req`'s own; if it raises, finish `req` with a 500 error
    (logged with its traceback) instead of failing the whole step."""
    try:
        fn(*args)
    except Exception as e:
        logger.exception("request %s failed in %s", req.rid, what)
        req.finish(FinishReason.error(f"internal error in {what}: {type(e).__name__}: {e}"))
