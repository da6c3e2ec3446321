"""The scheduler: continuous batching over a waiting queue and a running batch.

Each `step()` admits waiting requests (prefix-cache aware, chunked prefill), runs one forward
pass over a batch that may mix prefill chunks and decodes, samples, and retires finished
requests into the prefix cache.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from radixrt.cache.explain import EvictionLog, Explanation, explain
from radixrt.cache.kv_events import BaseKVEvents, NoKVEvents
from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.pins import BasePinTable, NoPinTable
from radixrt.cache.tree_node import held_node
from radixrt.cache.tree_summary import TreeSummary, summarize
from radixrt.core import Batch, FinishKind, FinishReason, Req
from radixrt.core.config import SchedulerConfig
from radixrt.core.step_times import step_kind
from radixrt.executor.model_runner import ModelRunner
from radixrt.executor.sampler import Sampler
from radixrt.scheduler.admission import reject_reason, shares_uncached_prefix, wants_input_logprobs
from radixrt.scheduler.grammar_queue import GrammarQueue, NoGrammarQueue
from radixrt.scheduler.logprobs import add_input_logprobs, logits_layout, sampled_rows
from radixrt.scheduler.misses import MissLog
from radixrt.scheduler.picks import sample_picks
from radixrt.scheduler.policy import SchedulePolicy
from radixrt.scheduler.retire import has_uncomputed_tail, retire
from radixrt.scheduler.speculative import BaseDrafter, TokenTexts, build_speculation, decodes_rows
from radixrt.scheduler.stats import SchedulerStats, guarded
from radixrt.scheduler.stop_check import FinishChecker

logger = logging.getLogger("radixrt")

SUMMARY_MAX_NODES = 10_000  # the most tree nodes one summary walks (about 10 ms on this thread)


class Scheduler:
    """Owns the queues; every mutation of requests and KV ownership happens in `step()`."""

    def __init__(
        self,
        runner: ModelRunner,
        kv: KVCacheManager,
        finish: FinishChecker,
        config: SchedulerConfig,
        grammar: GrammarQueue | None = None,
        pins: BasePinTable | None = None,
        events: BaseKVEvents | None = None,
        evictions: EvictionLog | None = None,
        drafter: BaseDrafter | None = None,
        texts: TokenTexts | None = None,
    ) -> None:
        self.runner = runner
        self.kv = kv
        self.finish = finish
        self.config = config
        self.prefill_chunk = config.prefill_chunk(runner.device.type)  # prompt tokens per step
        self.sampler = Sampler(runner.arch.vocab_size, finish.eos_token_ids)
        self.policy = SchedulePolicy(
            config.schedule_policy, self._match, config.max_wait_s, config.random_seed
        )
        self.waiting: list[Req] = []
        self.running: list[Req] = []  # admitted: prefilling (kv_len < seq_len - 1) or decoding
        # Finished with output tokens no step computed (jump-forward appended them): the next
        # step computes them, no sample, then they go to the cache and are reported (one step
        # later), so a next turn replaying the whole output reads all of it from the cache.
        self.closing: list[Req] = []
        self._closed: list[Req] = []  # closing ones retired without their tail, to report
        self.stats = SchedulerStats()
        self.grammar = grammar or NoGrammarQueue()  # constrained requests wait here first
        # Pinned prefixes: applied when a request that asks for them finishes (its prompt is
        # in the tree then), extended when a request's match covers them, expired each step.
        self.pins = pins or NoPinTable("pins are not set up for this scheduler")
        self.misses = MissLog()  # requests admitted with little cached, explained then
        # The tree's block events (cache/kv_events.py; the same object the tree reports to),
        # sent once per loop iteration by `publish_events`.
        self.events = events or NoKVEvents()
        # The tree's recent evictions, which `explain` reads (an observer of the tree, added
        # where the cache is built; one never added stays empty: nothing reads as evicted).
        self.evictions = evictions or EvictionLog()
        self.speculation = build_speculation(config, kv, self.sampler, runner.context_len,
                                             self.stats, self._check_finish_guarded,
                                             self.grammar, drafter,
                                             decodes_rows(runner), texts,
                                             runner.device.type)  # fmt: skip

    # ---- requests in and out -------------------------------------------------------------

    def add_request(self, req: Req) -> None:
        """Queue a request; one that can never run is finished at once with an abort reason."""
        req.arrival_time = req.arrival_time or time.monotonic()
        error = reject_reason(req, self.runner.context_len, self.kv.allocator.capacity,
                              self.runner.arch.vocab_size)  # fmt: skip
        if error:
            req.finish(FinishReason.error(error, 400))
            return
        if not self.grammar.hold(req):
            self.waiting.append(req)

    def abort(self, rid: str) -> Req | None:
        """Finish request `rid` (waiting or running) with an abort reason; return it if found."""
        if (held := self.grammar.abort(rid)) is not None:
            return held
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.rid == rid:
                    req.finish(FinishReason(FinishKind.ABORT, message="aborted"))
                    queue.remove(req)
                    self.kv.release(req)
                    return req
        return None

    def flush_cache(self, disk: bool = False) -> list[str] | None:
        """Drop the prefix cache and the host tier (and the disk tier's files when `disk`);
        only when idle (None, and nothing done, otherwise). Returns the tiers cleared."""
        if not self.is_idle:
            return None
        self.pins.clear()  # the tree refuses to reset while anything is pinned
        self.kv.cache.reset()
        return ["device", *self.kv.tiers.clear(disk)]

    def close(self) -> None:
        """Finish the lower tiers' pending writes and the last events (the loop's last act)."""
        self.kv.tiers.close()
        self.events.close()

    def publish_events(self) -> None:
        """Send the tree's block events since the last call, as one batch."""
        self.events.publish()

    def update_pin(self, pin_id: str, expire_at: float | None) -> bool:
        """Give pin `pin_id` a new expiry, or drop it (None); False when there is none."""
        if expire_at is None:
            return self.pins.unpin(pin_id)
        return self.pins.set_expiry(pin_id, expire_at)

    def explain(
        self, input_ids: list[int], extra_key: str | None, own_prefix: str | None
    ) -> Explanation:
        """Why `input_ids` would miss the prefix cache (radixrt.cache.explain)."""
        return explain(self.kv.cache, self.evictions, input_ids, extra_key, own_prefix)

    def tree_summary(self, max_rows: int) -> TreeSummary:
        """The largest subtrees of the prefix cache (radixrt.cache.tree_summary), bounded."""
        return summarize(self.kv.cache, max_rows, SUMMARY_MAX_NODES)

    def info(self) -> dict[str, Any]:
        """The figures InfoReplyMsg carries (all but reply_id): pool, queues, counters."""
        kv, s = self.kv, self.stats
        return {
            "max_total_tokens": kv.allocator.capacity, "free_tokens": kv.allocator.num_free,
            "evictable_tokens": kv.cache.evictable_size,
            "protected_tokens": kv.cache.protected_size, "num_running_reqs": len(self.running),
            "num_queued_reqs": len(self.waiting) + self.grammar.num_held,
            "prompt_tokens": s.prompt_tokens, "cached_tokens": s.cached_tokens,
            "generated_tokens": s.generated_tokens, "cache_hit_rate": s.hit_rate,
            "forward_passes": s.forward_passes, "retractions": s.retractions,
            "forward_time_s": s.forward_time_s, "step_time_s": s.step_time_s,
            "pinned_tokens": kv.cache.pinned_size, "num_pins": self.pins.num_pins,
            "tiers": kv.tiers.info(), "step_times": s.step_times.rows(), **s.spec_figures(),
        }  # fmt: skip

    @property
    def is_idle(self) -> bool:
        return (
            not self.waiting and not self.running and not self.closing
            and not self.grammar.num_held
        )  # fmt: skip

    def check_pool_whole(self) -> None:
        """When idle: free + evictable + protected == capacity, else RuntimeError."""
        if self.is_idle:
            self.kv.check_whole()

    # ---- one step ------------------------------------------------------------------------

    def step(self) -> list[Req]:
        """Run one forward pass; return the requests that got a new token or finished."""
        started = time.perf_counter()
        self.pins.expire()
        failed = self.grammar.release_ready(self.waiting)  # grammars that failed to compile
        batch = self._schedule()
        failed, self._closed = failed + self._closed, []
        if batch is None:
            self.grammar.wait(0.01)  # only requests waiting for a grammar, if any
            return failed
        kind = step_kind(batch.reqs)
        out_loc = self.kv.alloc_for(batch.reqs)  # also written into the requests' rows
        self.speculation.lay_out()  # the rows its draft trees attend through
        logits_rows, sample_rows = logits_layout(batch)
        forward_start = time.perf_counter()
        logits = self.runner.forward(batch, out_loc, logits_rows)
        forward_s = time.perf_counter() - forward_start
        # The row cost is measured on passes whose every row is sampled: a prompt's logprob
        # rows have logits too, but they are extend rows, so such a pass is not one.
        self.speculation.observe(len(out_loc), sampled_rows(batch, logits_rows), forward_s)
        done = failed + self._process(batch, logits, sample_rows)
        self.stats.count_pass(kind, forward_s, time.perf_counter() - started)
        return done

    def _schedule(self) -> Batch | None:
        # Decoding: one uncomputed token, or (speculating) forced tokens to draft after.
        after_forced = self.speculation.drafts_after_forced
        decoding = [r for r in self.running if r.kv_len == r.seq_len - 1 or after_forced(r)]
        for r in decoding:
            r.extend_len = r.seq_len - r.kv_len
            r.draft_ids, r.draft_parents, r.draft_rows = [], [], []
        while decoding and self.kv.available_size < self._decode_slots(decoding):
            self._retract(decoding.pop())  # newest last: it gives up its slots first
        self.speculation.plan(decoding, self.kv.available_size - self._decode_slots(decoding))
        budget = self.prefill_chunk
        decoding_ids = {id(r) for r in decoding}
        prefilling = [r for r in self.running
                      if r.kv_len < r.seq_len - 1 and id(r) not in decoding_ids]  # fmt: skip
        reserved = len(decoding) * self.config.decode_reserve_tokens
        avail = self.kv.available_size - self._decode_slots(decoding)
        closing, self.closing = self.closing, []
        for r in closing:  # a finished request's tail, whole this step or never
            n = r.seq_len - r.kv_len
            if n > budget or self.kv.slots_needed(r, n) > avail:
                retire(r, self.kv, self.pins)
                self._closed.append(r)
                continue
            r.extend_len, r.draft_ids = n, []
            budget -= n
            avail -= self.kv.slots_needed(r, n)
            self.closing.append(r)
        for r in prefilling:  # an unfinished chunked prefill continues first
            fits = self.kv.tokens_fitting(r, avail)
            r.extend_len = max(min(r.seq_len - r.kv_len, budget, fits), 0)
            budget -= r.extend_len
            avail -= self.kv.slots_needed(r, r.extend_len)
            reserved += r.extend_len
        prefilling = [r for r in prefilling if r.extend_len > 0]
        prefilling += self._admit(budget, reserved + len(decoding))
        self._draft_after_prompts(prefilling, decoding)
        reqs = prefilling + self.closing + decoding
        if not reqs:
            if self.running:  # stuck mid-prefill without slots: free the newest and retry
                self._retract(self.running[-1])
                return self._schedule()
            return None
        # Every decoding request samples, and a prefill that ends its prompt (one that also
        # verifies a draft after it computes past its fill_ids, as a speculating decode does).
        return Batch(reqs, [r.kv_len + r.extend_len >= r.seq_len for r in prefilling]
                     + [False] * len(self.closing) + [True] * len(decoding))  # fmt: skip

    def _draft_after_prompts(self, prefilling: list[Req], decoding: list[Req]) -> None:
        """Speculating: a draft after each prompt this step completes (no output yet, no
        prompt logprobs asked), verified in the same pass, within the slots the step leaves
        beyond every running request's decode reserve."""
        ending = [r for r in prefilling
                  if r.kv_len + r.extend_len == r.seq_len and not r.output_ids
                  and not wants_input_logprobs(r) and self.speculation.limit(r) > 0]  # fmt: skip
        if not ending:
            return
        taken = sum(self.kv.slots_needed(r, r.extend_len) for r in prefilling + self.closing)
        spare = (self.kv.available_size - self._decode_slots(decoding) - taken
                 - len(self.running) * self.config.decode_reserve_tokens)  # fmt: skip
        if spare > 0:
            self.speculation.plan_prompt_ends(ending, spare)

    def _admit(self, budget: int, reserved: int) -> list[Req]:
        admitted: list[Req] = []
        prefilling = [r for r in self.running if r.kv_len < r.seq_len - 1]
        for req in self.policy.order(self.waiting):
            if budget <= 0 or len(self.running) >= self.config.max_running_requests:
                break
            if self.kv.req_to_token_pool.num_free == 0:
                break
            if shares_uncached_prefix(req, admitted + prefilling):
                continue  # admit it later, once the other's prefix is in the cache
            self.kv.admit(req)  # locks the cached prefix: it no longer counts as evictable
            req.extend_len = min(req.seq_len - req.kv_len, budget)
            must_keep = reserved if (self.running or admitted) else 0
            if self.kv.available_size < self.kv.slots_needed(req, req.extend_len) + must_keep:
                self.kv.release(req)  # nothing computed yet: just unlock and free the row
                break
            self.waiting.remove(req)
            self.running.append(req)
            admitted.append(req)
            node = held_node(req)  # admitted: it holds its match's lock
            self.pins.touch(node)  # a hit on a sliding pin extends it
            budget -= req.extend_len
            reserved += req.extend_len + self.config.decode_reserve_tokens
            if req.num_retractions == 0:
                self.stats.prompt_tokens += req.prompt_len
                self.stats.cached_tokens += req.cached_tokens
                if req.cached_tokens:
                    self.kv.cache.observers.hit(node)
                self.misses.observe(req, self.explain)
        return admitted

    def _decode_slots(self, decoding: list[Req]) -> int:
        """Free slots this step of `decoding` takes: extend_len tokens each (1, or more with a
        draft), new pages only when paged."""
        return sum(self.kv.slots_needed(r, r.extend_len) for r in decoding)

    def _process(self, batch: Batch, logits: torch.Tensor, sample_rows: list[int]) -> list[Req]:
        row = 0
        to_sample: list[Req] = []
        sample_idx: list[int] = []
        touched: list[Req] = []
        speculated: list[tuple[Req, int]] = []  # (request, its first logits row)
        closing = {id(r) for r in self.closing}
        for req, sample, last in zip(batch.reqs, batch.sample_mask, sample_rows):
            req.sampling_steps += sample
            if req.draft_ids:  # verified below, after the one-token requests are sampled
                speculated.append((req, row))
                row += 1 + len(req.draft_ids)  # its verifying rows' logits
                continue
            if wants_input_logprobs(req):
                n = req.extend_len
                self.stats.input_logprob_rows += n
                guarded(req, "input logprobs", add_input_logprobs, req, logits[row : row + n],
                         req.kv_len)  # fmt: skip
                row += n
            elif sample:
                row += 1
            req.kv_len += req.extend_len
            if req.extend_len > 1:
                self.kv.cache_unfinished(req)  # a prefilled chunk becomes shareable at once
            else:
                self.kv.advance_window(req)  # its sliding window moved on by one token
            if id(req) in closing:  # cached and reported below
                continue
            if req.is_finished:  # its own fault above: it goes like any finished request
                touched.append(req)
                continue
            if not sample:
                continue
            if len(req.output_ids) >= req.sampling_params.max_new_tokens:
                req.finish(FinishReason(FinishKind.LENGTH))  # max_new_tokens == 0: scoring only
                touched.append(req)
            else:
                to_sample.append(req)
                sample_idx.append(last)
        if to_sample:
            touched += sample_picks(to_sample, logits[sample_idx], self.grammar, self.sampler,
                                    self.stats, self._check_finish)  # fmt: skip
        if speculated:
            # Those that ended their prompt in this pass: the prompt becomes shareable at once
            # (its output stays the request's until it finishes, as after a one-token step).
            ended = [req for req, _ in speculated if req.kv_len < req.prompt_len]
            touched += self.speculation.verify(speculated, logits)
            for req in ended:
                if not req.is_finished:
                    self.kv.cache_unfinished(req, req.prompt_len)
        closed = [r for r in self.closing if id(r) in closing]
        self.closing = [r for r in self.closing if id(r) not in closing]
        reported: list[Req] = []
        for req in touched:
            if req.is_finished:
                self.running.remove(req)
                if has_uncomputed_tail(req):
                    self.closing.append(req)
                    continue
                retire(req, self.kv, self.pins)
            reported.append(req)
        for req in closed:
            retire(req, self.kv, self.pins)
        return reported + closed

    def _check_finish_guarded(self, req: Req, jump: bool = True) -> None:
        guarded(req, "the finish check", self._check_finish, req, jump)

    def _check_finish(self, req: Req, jump: bool = True) -> None:
        """Finish check, then the grammar advance (and jump-forward, where `jump`)."""
        self.finish.check(req, self.runner.context_len)
        self.grammar.accept(req, lambda r: self.finish.check(r, self.runner.context_len), jump)

    def _retract(self, req: Req) -> None:
        """Give a running request's slots back (computed tokens go to the cache); re-queue it."""
        self.kv.release(req)
        self.running.remove(req)
        req.num_retractions += 1
        self.waiting.insert(0, req)
        self.stats.retractions += 1
        logger.info("retracted request %s (out of KV slots)", req.rid)

    def _match(self, req: Req) -> tuple[int, object]:
        m = self.kv.match(req)
        return int(m.slots.numel()), m.last_node
