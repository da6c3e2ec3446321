"""Engine: the offline, in-process API: a client of the same SchedulerLoop the server's
scheduler process runs (scheduler/loop.py), over a ThreadTransport on a background thread."""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from radixrt.core import SamplingParams
from radixrt.core.config import split_kwargs
from radixrt.core.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    ControlErrorMsg,
    ExplainReplyMsg,
    ExplainReqMsg,
    FatalErrorMsg,
    FlushCacheReplyMsg,
    FlushCacheReqMsg,
    FromSchedulerMsg,
    GenerateReqMsg,
    GetInfoReqMsg,
    InfoReplyMsg,
    StopMsg,
)
from radixrt.core.sampling import with_prediction_ids
from radixrt.scheduler.loop import SchedulerLoop, ThreadTransport
from radixrt.serve.engine.request_output import RequestOutput
from radixrt.serve.results.state import fan_out

logger = logging.getLogger("radixrt")

# The Engines of this process whose scheduler thread runs (by id): each has its own OpenMP
# thread pool, and with more OpenMP threads than cores libgomp throttles its spin-waits, so
# every parallel region pays a futex wake-up. Measured on 2 cores: an idle second Engine made
# the first decode 8 chat streams at 500 instead of 840 tokens/s.
_RUNNING: set[int] = set()


class SchedulerFailedError(RuntimeError):
    """The scheduler loop failed; the message ends with its exception."""


class Engine:
    """Load a model and generate with continuous batching, without a server.

    Keyword arguments are the server's flags in snake case (`max_total_tokens=`, `dtype=`,
    `disable_radix_cache=`, ...). Use as a context manager or call `shutdown()`.
    """

    def __init__(self, model_path: str | None = None, **kwargs: Any) -> None:
        from radixrt.scheduler.builder import build_scheduler  # torch is imported from here on

        self.model_config, self.cache_config, self.scheduler_config = split_kwargs(
            {"model_path": model_path, **kwargs}
        )
        self._outputs: dict[str, RequestOutput] = {}  # rid -> its caller's handle
        self._replies: dict[int, queue.Queue[Any]] = {}  # reply_id -> a waiting caller
        self._reply_ids = itertools.count()
        self._error: SchedulerFailedError | None = None
        self._transport = ThreadTransport(self._deliver)
        # The scheduler thread loads the model too: every torch and C-kernel call then comes
        # from one thread, so the process has one OpenMP thread pool. A second pool (a load
        # on this thread, steps on that one) makes libgomp throttle its spin-waits, and every
        # parallel region then pays a futex wake-up: decode steps measured 30-37 ms instead
        # of 21-24 (SmolLM2, 2 cores).
        built: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(
            target=self._run, args=(build_scheduler, built), name="radixrt-scheduler", daemon=True
        )
        self._thread.start()
        result = built.get()
        if isinstance(result, BaseException):
            self._thread.join()
            raise result
        self.scheduler, self.tokenizer = result
        if _RUNNING and self.scheduler.runner.device.type == "cpu":
            logger.warning(
                "%d other Engine(s) already run in this process: each has its own OpenMP thread "
                "pool, and OpenMP then stops spin-waiting, which slows every CPU engine here "
                "(measured 1.6x on 2 cores); run engines in separate processes, or shut one "
                "down before starting another", len(_RUNNING),
            )  # fmt: skip
        _RUNNING.add(id(self))

    # ---- public API ----------------------------------------------------------------------

    def generate(
        self,
        prompt: str | list[str] | None = None,
        sampling_params: dict[str, Any] | SamplingParams | list[Any] | None = None,
        input_ids: list[int] | list[list[int]] | None = None,
        stream: bool = False,
        extra_key: str | None = None,
        **logprob_args: Any,
    ) -> dict[str, Any] | list[dict[str, Any]] | Iterator[dict[str, Any]]:
        """Generate for one prompt (a dict) or a list of prompts (a list of dicts, n each).

        `stream=True` (single prompt, n == 1) returns an iterator of cumulative results.
        `return_logprob`, `logprob_start_len` and `top_logprobs_num` may be passed here too.
        """
        outs, single = self._submit(prompt, input_ids, sampling_params, extra_key, logprob_args)
        if stream:
            if not single or len(outs) != 1:
                raise ValueError("stream=True takes a single prompt with n == 1")
            return self._stream(outs[0])
        results = [self._wait(o) for o in outs]
        return results[0] if single and len(results) == 1 else results

    def flush_cache(self, disk: bool = False) -> bool:
        """Drop the prefix cache and the host tier (with `disk`, also this model's files in
        the disk tier); only succeeds when no request is running."""
        reply: FlushCacheReplyMsg = self._ask(lambda rid: FlushCacheReqMsg(rid, disk))
        return reply.success

    def explain_cache(
        self, prompt: str | list[int], extra_key: str | None = None
    ) -> dict[str, Any]:
        """Why `prompt` (text or token ids) would miss the prefix cache in namespace
        `extra_key`: matched tokens, the divergence offset and the cause (radixrt.cache.explain);
        the cached tokens after the divergence are ids (`cached_next`)."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        reply: ExplainReplyMsg = self._ask(lambda rid: ExplainReqMsg(rid, ids, extra_key, ""))
        return {k: getattr(reply, k) for k in reply.__struct_fields__ if k != "reply_id"}

    def get_stats(self) -> dict[str, Any]:
        info: InfoReplyMsg = self._ask(GetInfoReqMsg)
        return {
            "prompt_tokens": info.prompt_tokens,
            "cached_tokens": info.cached_tokens,
            "hit_rate": info.cache_hit_rate,
            "generated_tokens": info.generated_tokens,
            "forward_passes": info.forward_passes,
            "forward_time_s": info.forward_time_s,
            "step_time_s": info.step_time_s,
            "retractions": info.retractions,
            "max_total_tokens": info.max_total_tokens,
            "tiers": [msgspec.structs.asdict(t) for t in info.tiers],
            "spec_drafted_tokens": info.spec_drafted_tokens,
            "spec_accepted_tokens": info.spec_accepted_tokens,
            "spec_verify_steps": info.spec_verify_steps,
            "spec_emitted_tokens": info.spec_emitted_tokens,
            "spec_tree_steps": info.spec_tree_steps,
            "spec_tree_branches": info.spec_tree_branches,
            "spec_tree_side_accepts": info.spec_tree_side_accepts,
            "spec_prompt_end_steps": info.spec_prompt_end_steps,
            "spec_prompt_end_accepted": info.spec_prompt_end_accepted,
        }

    def shutdown(self) -> None:
        """Stop the scheduler thread and drop references to the model and pools."""
        _RUNNING.discard(id(self))
        self._transport.put(StopMsg())
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.scheduler.grammar.close()
        if not self._thread.is_alive():  # collectives are the scheduler thread's until it ends
            self.scheduler.runner.shutdown()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ---- submission ----------------------------------------------------------------------

    def _submit(
        self,
        prompt: Any,
        input_ids: Any,
        sampling_params: Any,
        extra_key: str | None,
        logprob_args: dict[str, Any],
    ) -> tuple[list[RequestOutput], bool]:
        if self._error is not None:
            raise RuntimeError("the engine's scheduler failed") from self._error
        if (prompt is None) == (input_ids is None):
            raise ValueError("give exactly one of prompt and input_ids")
        if prompt is not None:
            single = isinstance(prompt, str)
            prompts = [prompt] if single else list(prompt)
            if not all(isinstance(p, str) for p in prompts):
                raise ValueError("prompt must be a string or a list of strings")
            id_lists = [self.tokenizer.encode(p) for p in prompts]
        else:
            single = bool(input_ids) and isinstance(input_ids[0], int)
            id_lists = [list(input_ids)] if single else [list(x) for x in input_ids]
        if isinstance(sampling_params, list) and len(sampling_params) != len(id_lists):
            raise ValueError(f"{len(sampling_params)} sampling_params for {len(id_lists)} prompts")
        # Validated (a predicted output given as text tokenized) once per dict given.
        params = (
            [self._sampling_params(p) for p in sampling_params]
            if isinstance(sampling_params, list)
            else [self._sampling_params(sampling_params)] * len(id_lists)
        )
        outs: list[RequestOutput] = []
        for ids, sp in zip(id_lists, params):
            if logprob_args:
                sp = SamplingParams.from_dict({**sp.to_dict(), **logprob_args})
            self._check_grammar(sp)
            for state, sent in fan_out(list(ids), sp, time.monotonic()):
                out = RequestOutput(state, self.tokenizer)
                self._outputs[state.rid] = out
                outs.append(out)
                self._transport.put(GenerateReqMsg(state.rid, state.input_ids, sent, extra_key))
        if self._error is not None:  # the loop died meanwhile: nobody will answer these
            for out in outs:
                self._outputs.pop(out.state.rid, None)
            raise RuntimeError("the engine's scheduler failed") from self._error
        return outs, single

    def _sampling_params(self, p: Any) -> SamplingParams:
        """`p` validated, a predicted output given as text (`prediction`) as its ids."""
        return SamplingParams.from_dict(with_prediction_ids(p, self._encode))

    def _encode(self, text: str) -> list[int]:
        """Text within a prompt (a predicted output): its ids, no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _check_grammar(self, sp: SamplingParams) -> None:
        """Compile a constrained request's grammar now (cached for the scheduler); a spec
        that fails or takes too long raises GrammarError (a ValueError) before queueing."""
        from radixrt.grammar.base import GrammarSpec

        spec = GrammarSpec.from_params(sp)
        if spec is not None:
            self.scheduler.grammar.compiler.compile(spec)

    def _wait(self, out: RequestOutput) -> dict[str, Any]:
        try:
            while (update := out.updates.get()) is not True:
                if isinstance(update, BaseException):
                    raise RuntimeError("the engine's scheduler failed") from update
            return out.result()
        finally:
            self._outputs.pop(out.state.rid, None)

    def _stream(self, out: RequestOutput) -> Iterator[dict[str, Any]]:
        try:
            while True:
                finished = out.updates.get()
                if isinstance(finished, BaseException):
                    raise RuntimeError("the engine's scheduler failed") from finished
                yield out.result()
                if finished:
                    return
        finally:
            if not out.state.is_finished:  # the caller stopped reading: abort the request
                self._transport.put(AbortReqMsg(out.state.rid))
            self._outputs.pop(out.state.rid, None)

    def _ask(self, msg_cls: Any) -> Any:
        """Send msg_cls(reply_id) to the loop and wait for its reply."""
        if self._error is not None:
            raise RuntimeError("the engine's scheduler failed") from self._error
        reply_id = next(self._reply_ids)
        box: queue.Queue[Any] = queue.Queue()
        self._replies[reply_id] = box
        self._transport.put(msg_cls(reply_id))
        if self._error is not None:  # the loop died meanwhile: nobody will answer
            self._replies.pop(reply_id, None)
            raise RuntimeError("the engine's scheduler failed") from self._error
        reply = box.get()
        if isinstance(reply, BaseException):
            raise RuntimeError("the engine's scheduler failed") from reply
        if isinstance(reply, ControlErrorMsg):  # the question failed; the scheduler lives on
            raise RuntimeError(f"the scheduler could not answer: {reply.message}")
        return reply

    # ---- the scheduler thread ------------------------------------------------------------

    def _run(self, build: Callable[..., Any], built: queue.Queue[Any]) -> None:
        """Load the model (its result or exception goes to `built`), then run the loop."""
        try:
            configs = (self.model_config, self.cache_config, self.scheduler_config)
            scheduler, tokenizer = build(*configs)
        except BaseException as e:  # noqa: BLE001 - raised again by the constructor
            built.put(e)
            return
        loop = SchedulerLoop(scheduler, self._transport)
        built.put((scheduler, tokenizer))
        try:
            loop.run()
        except BaseException as e:  # noqa: BLE001 - a bug in delivery: every waiter must hear
            logger.exception("scheduler loop failed")
            self._fail(f"{type(e).__name__}: {e}")

    def _deliver(self, msg: FromSchedulerMsg) -> None:
        """Route the loop's messages to the callers waiting on them (scheduler thread)."""
        if isinstance(msg, BatchTokenOutMsg):
            for out_msg in msg.outputs:
                out = self._outputs.get(out_msg.rid)
                if out is None:  # its caller stopped reading (aborted)
                    continue
                finished = out.state.apply(out_msg)
                if not finished:
                    out.updates.put(False)
                for state in finished:  # itself, and samples that waited on its logprobs
                    waiter = self._outputs.get(state.rid)
                    if waiter is not None:
                        waiter.updates.put(True)
        elif isinstance(msg, (InfoReplyMsg, FlushCacheReplyMsg, ExplainReplyMsg, ControlErrorMsg)):
            box = self._replies.pop(msg.reply_id, None)
            if box is not None:
                box.put(msg)
        elif isinstance(msg, FatalErrorMsg):
            logger.error("the scheduler loop failed:\n%s", msg.message)
            self._fail(msg.message.strip().splitlines()[-1])

    def _fail(self, reason: str) -> None:
        """Every caller waiting, and every later one, gets SchedulerFailedError(reason)."""
        self._error = error = SchedulerFailedError(reason)
        for out in list(self._outputs.values()):
            out.updates.put(error)
        for box in list(self._replies.values()):
            box.put(error)
