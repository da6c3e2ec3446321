"""Engine: the offline, in-process API. Runs the scheduler loop on a background thread."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from radixrt.config import split_kwargs
from radixrt.core import Req, SamplingParams
from radixrt.engine_output import RequestOutput

logger = logging.getLogger("radixrt")

_IDLE_WAIT_S = 0.05


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
        self.scheduler, self.tokenizer = build_scheduler(
            self.model_config, self.cache_config, self.scheduler_config
        )
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._outputs: dict[str, RequestOutput] = {}
        self._error: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="radixrt-scheduler", daemon=True)
        self._thread.start()

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

    def flush_cache(self) -> bool:
        """Drop the prefix cache; only succeeds when no request is running."""
        done: queue.Queue[bool] = queue.Queue()
        self._inbox.put(("flush", done))
        return done.get()

    def get_stats(self) -> dict[str, Any]:
        s = self.scheduler.stats
        return {
            "prompt_tokens": s.prompt_tokens,
            "cached_tokens": s.cached_tokens,
            "hit_rate": s.hit_rate,
            "generated_tokens": s.generated_tokens,
            "forward_passes": s.forward_passes,
            "retractions": s.retractions,
            "max_total_tokens": self.scheduler.kv.allocator.capacity,
        }

    def shutdown(self) -> None:
        """Stop the scheduler thread and drop references to the model and pools."""
        self._stopped.set()
        self._inbox.put(("stop", None))
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
        params = (
            sampling_params
            if isinstance(sampling_params, list)
            else [sampling_params] * len(id_lists)
        )
        if len(params) != len(id_lists):
            raise ValueError(f"{len(params)} sampling_params for {len(id_lists)} prompts")
        outs: list[RequestOutput] = []
        for ids, p in zip(id_lists, params):
            sp = SamplingParams.from_dict(p)
            if logprob_args:
                sp = SamplingParams.from_dict({**sp.to_dict(), **logprob_args})
            self._check_grammar(sp)
            for i in range(sp.n):
                sub = sp if sp.n == 1 else sp.for_sample(i)
                req = Req(uuid.uuid4().hex, list(ids), sub, extra_key=extra_key)
                req.arrival_time = time.monotonic()
                out = RequestOutput(req, self.tokenizer)
                self._outputs[req.rid] = out
                outs.append(out)
                self._inbox.put(("add", req))
        return outs, single

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
            self._outputs.pop(out.req.rid, None)

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
            if not out.req.is_finished:  # the caller stopped reading: abort the request
                self._inbox.put(("abort", out.req.rid))
            self._outputs.pop(out.req.rid, None)

    # ---- the scheduler thread ------------------------------------------------------------

    def _loop(self) -> None:
        sched = self.scheduler
        try:
            while not self._stopped.is_set():
                block = sched.is_idle
                for cmd, arg in self._drain(block):
                    self._handle(cmd, arg)
                for req in sched.step():
                    self._notify(req)
                sched.check_pool_whole()
        except BaseException as e:  # noqa: BLE001 - every waiter must hear of it
            logger.exception("scheduler loop failed")
            self._error = e
            for out in list(self._outputs.values()):
                out.updates.put(e)

    def _drain(self, block: bool) -> list[tuple[str, Any]]:
        items: list[tuple[str, Any]] = []
        try:
            items.append(
                self._inbox.get(timeout=_IDLE_WAIT_S) if block else self._inbox.get_nowait()
            )
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            return items

    def _handle(self, cmd: str, arg: Any) -> None:
        sched = self.scheduler
        if cmd == "add":
            sched.add_request(arg)
            if arg.is_finished:  # rejected at once
                self._notify(arg)
        elif cmd == "abort":
            req = sched.abort(arg)
            if req is not None:
                self._notify(req)
        elif cmd == "flush":
            ok = sched.is_idle
            if ok:
                sched.kv.cache.reset()
            arg.put(ok)
        elif cmd == "stop":
            self._stopped.set()

    def _notify(self, req: Req) -> None:
        out = self._outputs.get(req.rid)
        if out is not None:
            out.updates.put(req.is_finished)
