"""Constrained requests in the scheduler: the queue of requests waiting for their grammar, the
per-step vocabulary masks, and jump-forward over tokens the grammar forces.

A forced token is one the grammar allows alone (the mask has a single bit). Jump-forward
appends such tokens to `output_ids` right after the sampled token; the scheduler then computes
them in one extend, like a prefill chunk (they enter the radix tree with it), instead of one
decode step each. Greedy decoding would have picked exactly those tokens, so outputs are the
same with jump-forward on or off; only seeded sampling draws fewer random numbers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

import torch

from radixrt.core import FinishKind, FinishReason, Req
from radixrt.grammar.base import BaseGrammarMatcher, GrammarSpec
from radixrt.grammar.compiler import GrammarCompiler

logger = logging.getLogger("radixrt")


@dataclass(slots=True)
class GrammarStats:
    """Counters since start; mask time covers every mask computed (sampling and forcing)."""

    forced_tokens: int = 0
    mask_time_s: float = 0.0
    num_masks: int = 0
    mask_steps: int = 0  # decode/extend steps that applied a mask to the batch


class GrammarState:
    """A request's matcher and its next-token mask (computed once per position)."""

    def __init__(self, matcher: BaseGrammarMatcher, num_words: int, stats: GrammarStats) -> None:
        self.matcher = matcher
        self._num_words = num_words
        self._stats = stats
        self._mask: torch.Tensor | None = None  # (1, num_words) int32 CPU; None: stale

    def mask(self) -> torch.Tensor:
        """(num_words,) int32 bitmask of the tokens allowed next."""
        if self._mask is None:
            t0 = time.perf_counter()
            self._mask = torch.empty(1, self._num_words, dtype=torch.int32)
            self.matcher.fill_mask(self._mask, 0)
            self._stats.mask_time_s += time.perf_counter() - t0
            self._stats.num_masks += 1
        return self._mask[0]

    def accept(self, token_id: int) -> bool:
        self._mask = None
        return self.matcher.accept(token_id)

    def forced_token(self) -> int | None:
        """The only token allowed next, or None when there are several (or none)."""
        row = self.mask()
        words = row.nonzero()
        if words.numel() != 1:
            return None
        idx = int(words[0, 0])
        w = int(row[idx]) & 0xFFFFFFFF
        return idx * 32 + w.bit_length() - 1 if w & (w - 1) == 0 else None


class GrammarQueue:
    """Holds constrained requests until their grammar compiles; then serves their masks."""

    def __init__(self, compiler: GrammarCompiler, vocab_size: int, jump_forward: bool) -> None:
        self.compiler = compiler
        self.num_words = (vocab_size + 31) // 32
        self.jump_forward = jump_forward
        self.stats = GrammarStats()
        self._held: list[tuple[Req, Future[Any], float]] = []  # (req, compile, since)

    def hold(self, req: Req) -> bool:
        """Take `req` if it is constrained (True); it goes to the waiting list once compiled."""
        spec = GrammarSpec.from_params(req.sampling_params)
        if spec is None:
            return False
        self._held.append((req, self.compiler.submit(spec), time.monotonic()))
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
                matcher = self.compiler.new_matcher(fut.result())
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
            try:
                mask[i] = reqs[i].grammar.mask()
            except Exception as e:
                logger.exception("the grammar of request %s failed", reqs[i].rid)
                reqs[i].finish(
                    FinishReason.error(
                        f"internal error in the request's grammar: {type(e).__name__}: {e}"
                    )
                )
        self.stats.mask_steps += 1
        return mask

    def accept(self, req: Req, check_finish: Callable[[Req], None]) -> None:
        """Advance `req`'s grammar past its new last token (the caller has checked finish);
        with jump-forward, append the tokens forced after it, checking finish after each."""
        state: GrammarState | None = req.grammar
        if state is None or req.is_finished:
            return
        if not state.accept(req.output_ids[-1]):
            message = f"token {req.output_ids[-1]} is not allowed by the request's grammar"
            req.finish(FinishReason.error(message))
            return
        # Forced tokens have no logprobs from the model: requests that want them decode each.
        if not self.jump_forward or req.sampling_params.return_logprob:
            return
        while len(req.output_ids) < req.sampling_params.max_new_tokens:
            token = state.forced_token()
            if token is None:
                return
            req.output_ids.append(token)
            self.stats.forced_tokens += 1
            check_finish(req)
            if req.is_finished or not state.accept(token):
                return  # a stop token (finished, or ignored by ignore_eos) ends the jump


class NoGrammarQueue(GrammarQueue):
    """Constrained decoding off (a scheduler built without a tokenizer): such requests are
    finished at once with an abort reason."""

    def __init__(self) -> None:
        self.stats = GrammarStats()
        self._held = []

    def hold(self, req: Req) -> bool:
        if GrammarSpec.from_params(req.sampling_params) is None:
            return False
        message = "constrained decoding is not available in this scheduler"
        req.finish(FinishReason.error(message, 400))
        return True

    def close(self) -> None:
        pass
