"""Constrained requests in the scheduler: the queue of requests waiting for their grammar, the
per-step vocabulary masks, and jump-forward over tokens the grammar forces.

A forced token is one the grammar allows alone (the mask has a single bit). Jump-forward
appends such tokens to `output_ids` right after the sampled token; the scheduler then computes
them in one extend, like a prefill chunk (they enter the radix tree with it), instead of one
decode step each. Greedy decoding would have picked exactly those tokens, so outputs are the
same with jump-forward on or off; only seeded sampling draws fewer random numbers.

The token budget: on a matcher that bounds lengths, every mask is cut to the tokens after
which the output can still be finished within max_new_tokens (the budget is a function of the
position, so masks and forced tokens are the same with jump-forward on or off). A request whose
grammar needs more tokens than it may take is refused when its grammar is ready (400, naming
the minimum). A request that reaches max_new_tokens with a complete output ends with `stop`;
`length` means the output was cut before the grammar was complete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import Any

import torch

from radixrt.core import FinishKind, FinishReason, Req
from radixrt.grammar.base import UNREACHABLE, BaseGrammarMatcher, GrammarSpec
from radixrt.grammar.compiler import GrammarCompiler
from radixrt.grammar.reasoning_gate import ReasoningGate
from radixrt.scheduler.grammar_state import GrammarState, GrammarStats

logger = logging.getLogger("radixrt")


class GrammarQueue:
    """Holds constrained requests until their grammar compiles; then serves their masks."""

    def __init__(
        self,
        compiler: GrammarCompiler,
        vocab_size: int,
        jump_forward: bool,
        budget: bool = True,
        stop_ids: tuple[int, ...] = (),
    ) -> None:
        self.compiler = compiler
        self.stop_ids = stop_ids  # the model's stop tokens: none within a gated reasoning
        self.num_words = (vocab_size + 31) // 32
        self.jump_forward = jump_forward
        self.budget = budget  # cut masks to what can finish within max_new_tokens
        self.stats = GrammarStats()
        self._held: list[tuple[Req, Future[Any], float]] = []  # (req, compile, since)

    def hold(self, req: Req) -> bool:
        """Take `req` if it is constrained (True): a grammar, or a reasoning model's output
        with a thinking budget; it goes to the waiting list once compiled."""
        spec = GrammarSpec.from_params(req.sampling_params)
        if spec is None and not _thinking_bounded(req.sampling_params):
            return False
        if spec is not None:
            compiled = self.compiler.submit(spec)
        else:  # no grammar to compile: the gate over free text
            compiled = Future()
            compiled.set_result(None)
        self._held.append((req, compiled, time.monotonic()))
        return True

    def release_ready(self, waiting: list[Req]) -> list[Req]:
        """Append compiled requests to `waiting`; return those whose compile failed or timed
        out, finished with an abort reason."""
        failed: list[Req] = []
        still: list[tuple[Req, Future[Any], float]] = []
        now = time.monotonic()
        for req, fut, since in self._held:
            error = fut.exception() if fut.done() else None
            if fut.done() and error is None:
                matcher = self._matcher(req, fut.result())
                if (why := self._too_long(req, matcher)) is not None:
                    req.finish(FinishReason.error(why, 400))
                    failed.append(req)
                    continue
                req.grammar = GrammarState(matcher, self.num_words, self.stats)
                waiting.append(req)
            elif error is not None or now - since > self.compiler.timeout_s:
                why = str(error) if error is not None else "compiling the grammar timed out"
                req.finish(FinishReason.error(why, 400))
                failed.append(req)
            else:
                still.append((req, fut, since))
        self._held = still
        return failed

    def _matcher(self, req: Req, compiled: Any) -> BaseGrammarMatcher:
        """`req`'s matcher: its grammar's (`compiled`; None: none), behind a reasoning gate
        where its reasoning comes first (the grammar then applies after it)."""
        p = req.sampling_params
        inner = None if compiled is None else self.compiler.new_matcher(compiled)
        if p.reasoning_end_id is None:
            assert inner is not None  # (hold: a spec, or a reasoning end)
            return inner
        return ReasoningGate(
            inner, p.reasoning_end_id, p.reasoning_start_id, p.thinking_token_budget,
            self.stop_ids,
        )  # fmt: skip

    def _too_long(self, req: Req, matcher: BaseGrammarMatcher) -> str | None:
        """Why no output of the grammar fits `req`'s max_new_tokens, or None if one does (or
        the backend cannot tell)."""
        need = matcher.min_tokens() if self.budget else None
        spec = GrammarSpec.from_params(req.sampling_params)
        what = spec.kind if spec is not None else "grammar"
        if need == UNREACHABLE:
            return f"no output of the {what} can be written with this model's tokens"
        budget = req.sampling_params.max_new_tokens
        if need is not None and need > budget:
            return (
                f"the shortest output of the {what} takes {need} tokens, "
                f"but max_new_tokens is {budget}"
            )
        return None

    def draft_masks(self, req: Req, draft: list[int], stop_ids: set[int]) -> torch.Tensor:
        """(1 + n, num_words) masks along the first n tokens of `draft` that `req`'s grammar
        allows (GrammarState.along); n may be 0."""
        state = _state(req)
        assert state is not None  # only constrained requests draft under a grammar
        return state.along(draft, self._budget(req), stop_ids)

    def speculates(self, req: Req) -> bool:
        """Whether `req`'s grammar lets it verify drafts: its matcher rolls back, and unless
        jump-forward is off for it, it is not seeded sampling (jump-forward's forced tokens
        draw no random numbers, verified rows do, so a seed would pick other tokens)."""
        state = _state(req)
        if state is None or not state.matcher.can_rollback:
            return False
        p = req.sampling_params
        jumps = self.jump_forward and not p.return_logprob
        return not (jumps and p.seed is not None and not p.is_greedy)

    def _budget(self, req: Req) -> int | None:
        """Tokens `req` may still output, the next one included (None: masks are not cut)."""
        if not self.budget:
            return None
        return req.sampling_params.max_new_tokens - len(req.output_ids)

    def abort(self, rid: str) -> Req | None:
        """Finish held request `rid` with an abort reason; return it if found."""
        for i, (req, _, _) in enumerate(self._held):
            if req.rid == rid:
                del self._held[i]
                req.finish(FinishReason(FinishKind.ABORT, message="aborted"))
                return req
        return None

    @property
    def num_held(self) -> int:
        return len(self._held)

    def wait(self, timeout_s: float) -> None:
        """Block until a held compile finishes or `timeout_s` passes (nothing else to run)."""
        if self._held:
            wait_futures([f for _, f, _ in self._held], timeout_s, FIRST_COMPLETED)

    def close(self) -> None:
        """Stop the compile workers (compiles in progress finish on their own)."""
        self.compiler.shutdown()

    def vocab_mask(self, reqs: list[Req]) -> torch.Tensor | None:
        """(B, ceil(V / 32)) int32 CPU bitmask for the batch (all ones in free rows), or None
        when no request in it is constrained. A request whose matcher raises is finished with
        a 500 error (its row stays all ones; the caller skips finished requests)."""
        rows = [i for i, r in enumerate(reqs) if r.grammar is not None]
        if not rows:
            return None
        mask = torch.full((len(reqs), self.num_words), -1, dtype=torch.int32)
        for i in rows:
            grammar = _state(reqs[i])
            assert grammar is not None  # rows: the constrained requests
            try:
                mask[i] = grammar.mask(self._budget(reqs[i]))
            except Exception as e:
                logger.exception("the grammar of request %s failed", reqs[i].rid)
                reqs[i].finish(
                    FinishReason.error(
                        f"internal error in the request's grammar: {type(e).__name__}: {e}"
                    )
                )
        self.stats.mask_steps += 1
        return mask

    def accept(self, req: Req, check_finish: Callable[[Req], None], jump: bool = True) -> None:
        """Advance `req`'s grammar past its new last token (the caller has checked finish);
        with jump-forward (and `jump`), append the tokens forced after it, checking finish
        after each."""
        state = _state(req)
        if state is None or not self._advance(req, state):
            return
        # Forced tokens have no logprobs from the model: requests that want them decode each.
        if not jump or not self.jump_forward or req.sampling_params.return_logprob:
            return
        while not req.is_finished and len(req.output_ids) < req.sampling_params.max_new_tokens:
            token = state.forced_token(self._budget(req))
            if token is None:
                return
            req.output_ids.append(token)
            self.stats.forced_tokens += 1
            check_finish(req)
            if not self._advance(req, state):
                return

    def _advance(self, req: Req, state: GrammarState) -> bool:
        """Feed `req`'s last token to its grammar unless it stopped the request (a stop token
        is never fed); True if the request goes on. An output cut by max_new_tokens where the
        grammar is complete ends with `stop`, not `length`."""
        reason = req.finish_reason
        if reason is not None and reason.kind != FinishKind.LENGTH:
            if state.matcher.stuck():  # a stop token its mask allowed for want of any other
                _unspellable(req, "found no token to go on with")
            return False
        if not state.accept(req.output_ids[-1]):
            # The token was drawn under this grammar's own mask (or forced by it), so the
            # grammar and the vocabulary disagree: llguidance allows the token it would spell
            # a missing byte with, and a special token whose text the grammar writes.
            _unspellable(
                req,
                f"refused token {req.output_ids[-1]}, which its own mask allowed",
                "or text the tokenizer writes only with a special token",
            )
            return False
        if reason is not None:
            if state.matcher.is_accepting():
                req.finish_reason = FinishReason(FinishKind.STOP, message="grammar complete")
            return False
        return True


def _thinking_bounded(p: Any) -> bool:
    """Whether a request without a grammar still needs a matcher: its reasoning's tokens are
    capped (a thinking budget)."""
    return p.reasoning_end_id is not None and p.thinking_token_budget is not None


def _unspellable(req: Req, what: str, other: str = "") -> None:
    """End `req` with a 400: its grammar (which `what`, short of a complete output) needs a
    byte that no token of the vocabulary holds (a character this model cannot write, such as
    one of Unicode planes 4-11 with SmolLM2's), or `other`. The request asked for text the
    model cannot write: the client's error, not the server's."""
    needs = "a byte that no token of the vocabulary holds" + (f", {other}" if other else "")
    message = (
        f"the request's grammar cannot be followed with this model's vocabulary: it {what} "
        f"(the grammar needs {needs})"
    )
    req.finish_reason = None
    req.finish(FinishReason.error(message, status_code=400))


def _state(req: Req) -> GrammarState | None:
    """`req.grammar` as this queue's own class: only `release_ready` sets the slot."""
    state = req.grammar
    assert state is None or isinstance(state, GrammarState), type(state)
    return state


class NoGrammarQueue(GrammarQueue):
    """Constrained decoding off (a scheduler built without a tokenizer): such requests are
    finished at once with an abort reason."""

    def __init__(self) -> None:
        self.stats = GrammarStats()
        self._held = []

    def hold(self, req: Req) -> bool:
        p = req.sampling_params
        if GrammarSpec.from_params(p) is None and not _thinking_bounded(p):
            return False
        message = "constrained decoding is not available in this scheduler"
        req.finish(FinishReason.error(message, 400))
        return True

    def close(self) -> None:
        pass
