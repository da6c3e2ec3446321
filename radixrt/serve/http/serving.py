"""The serving pipeline, written once for every API dialect (api/*/).

A dialect is a parse (its body -> a `ServeRequest`: tokenized prompts, validated sampling
parameters, cache directives, session) and a render (render.py: typed output deltas -> its
wire format). Between the two, in this order and only here:

0. volume: the logprobs it asks for within --max-logprob-entries (protocol.py);
1. namespace: the tenant's prefix-cache namespace with the request's salt (tenancy.py); a
   cache handle the prompt starts with must be of the same namespace, and is pinned again;
2. admission: the tenant's share is checked and held until the submit (Tenancy.admit), so
   the work before the submit is bounded by the share too;
3. grammar: a constrained request's grammar is checked in a worker (grammar_check.py), within
   the tenant's share of the compile slots;
4. explain (asked for, whole answers only) and the prompt guard (a chat turn with a session);
   a chat-like call's cache-miss diagnosis against the earlier response it names, set on the
   render before any output (diagnostics/);
5. submit, then wait for the whole answer or stream the deltas; a client that goes away
   aborts its requests (unary: DisconnectWatcher; stream: the generator's `finally`), and a
   failure mid-stream ends it with the render's error event;
6. once answered, a chat-like call's prompt fingerprint is kept under its response id, and
   its prompt text with its prompt and output ids (`continuations`: every dialect's chat,
   messages and generateContent calls), so that a next turn replaying the answer as text is
   tokenized with the ids the cache holds (each dialect's parse encodes through it).

Every route that queues work comes through here and runs as its HTTP caller: a cache handle's
prefill (`make_handle`) and a cache explanation (`explain`) too, admitted and counted as the
tenant's like any request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from radixrt.core import PinSpec, SamplingParams
from radixrt.serve.http.cache_handles import CacheHandle, HandleRender, owner_of
from radixrt.serve.http.continuations import make_continuations
from radixrt.serve.http.diagnostics import FingerprintStore, PromptRecord, diagnose
from radixrt.serve.http.explain import explain_prompts
from radixrt.serve.http.grammar_check import GrammarChecker
from radixrt.serve.http.prompt_guard import PromptGuard, Turn
from radixrt.serve.http.protocol import BadRequestError, check_logprob_volume
from radixrt.serve.http.render import BaseRender, Explained, Finished
from radixrt.serve.http.req_state import ReqState, SchedulerDeadError
from radixrt.serve.http.tenancy import Tenancy, work_of
from radixrt.serve.http.wait import ClientGoneError, RequestFailedError, updates, wait_finished
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.web.middleware import SESSION_HEADER, caller_of, identity_of
from radixrt.serve.web.responses import json_response, sse_response


@dataclass(slots=True)
class ServeRequest:
    """One HTTP call as its dialect parsed it; everything validated (protocol.py's checks)."""

    prompts: list[list[int]]  # token ids; a cache handle's prefix already in front
    params: list[SamplingParams]  # one per prompt, fitted to the context (n samples each)
    stream: bool = False
    rids: list[str] | None = None  # the client's names for its prompts
    cache_salt: str | None = None  # the namespace within the tenant's (or extra_key, older)
    extra_key: str | None = None
    handle: CacheHandle | None = None  # a cache handle every prompt starts with: pinned again
    pins: list[PinSpec] = field(default_factory=list)  # prefixes to pin once each finishes
    session: str | None = None  # a session key from the body (X-Session-Id wins)
    explain: bool = False  # explain each prompt's cache miss (whole answers only)
    messages: list[dict[str, str]] | None = None  # a chat turn's messages, for the guard
    record: PromptRecord | None = None  # a chat-like call's fingerprint (one prompt), kept
    prompt_text: str | None = None  # a chat-like call's rendered prompt: kept answered

    @classmethod
    def prefill(cls, handle: CacheHandle, cache_salt: str | None = None) -> ServeRequest:
        """The request that computes a new cache handle's prefix and pins it (no output); it
        runs as its HTTP caller: admitted, in flight and counted (usage, request log) as the
        tenant's."""
        params = [SamplingParams(max_new_tokens=0)]
        return cls([handle.input_ids], params, cache_salt=cache_salt, handle=handle)


class ServingPipeline:
    """Runs ServeRequests. `tm`: the TokenizerManager or the --dp dispatcher."""

    def __init__(self, tm: Any, tenancy: Tenancy, grammar: GrammarChecker) -> None:
        self.tm = tm
        self.tenancy = tenancy
        self.grammar = grammar
        self.guard = PromptGuard(tm.metrics)
        self.max_logprob_entries = tm.config.max_logprob_entries
        config = tm.config
        self.fingerprints = FingerprintStore(config.max_fingerprints, config.max_fingerprint_bytes)
        self.continuations = make_continuations(
            config.continuation_max_bytes, config.continuation_max_turns
        )

    async def serve(self, request: Request, req: ServeRequest, render: BaseRender) -> Response:
        """Submit `req` and answer with `render`: whole, or streamed when `req.stream`."""
        states, explained, turn = await self._submit(request, req)
        owner = owner_of(request)
        if req.record is not None:
            render.diagnosis = diagnose(self.fingerprints, owner, req.record, req.prompts[0])
        if req.stream:
            stream = self._stream(states, render, turn, (owner, req))
            return sse_response(stream, render.media_type)
        try:
            await wait_finished(request, self.tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        if turn is not None:
            self.guard.record(*turn, states[0].out.output_ids)
        self._keep(owner, req.record)
        self._keep_turn(owner, req, states)
        outputs = [_whole(state) for state in states]
        answer = render.response(Finished(states, outputs, explained))
        return answer if isinstance(answer, Response) else json_response(answer)

    async def make_handle(
        self, request: Request, render: HandleRender, cache_salt: str | None = None
    ) -> Response:
        """Compute and pin a new cache handle's prefix (POST /v1/caches, Gemini's
        cachedContents); the handle counts against its owner's bound from new_handle until it
        is registered or refused, so concurrent creates cannot pass it."""
        req = ServeRequest.prefill(render.handle, cache_salt)
        try:
            return await self.serve(request, req, render)
        finally:
            render.registry.settle(render.handle)

    async def explain(
        self, request: Request, ids: list[int], cache_salt: str | None
    ) -> dict[str, Any]:
        """Why `ids` would miss the cache (POST /v1/cache/explain), metered like a request of
        that prompt: admitted against the tenant's share, counted in the caller's usage."""
        namespace = self.tenancy.namespace(request, cache_salt, None)
        with self.tenancy.admit(self.tm, request, 1, len(ids)):
            explained = await explain_prompts(self.tm, self.tenancy, request, [ids], namespace)
        self.tenancy.usage.observe_explain(caller_of(request), len(ids))
        return explained[tuple(ids)]

    async def _submit(
        self, request: Request, req: ServeRequest
    ) -> tuple[list[ReqState], Explained | None, Turn | None]:
        check_logprob_volume(req.prompts, req.params, self.max_logprob_entries)
        namespace = self.tenancy.namespace(request, req.cache_salt, req.extra_key)
        pins = list(req.pins)
        if req.handle is not None:
            if namespace != req.handle.namespace:
                raise BadRequestError("cache_salt differs from the one the cache was made with")
            pins.insert(0, req.handle.pin_spec())  # pinned again if a flush dropped it
        session = request.headers.get(SESSION_HEADER) or req.session
        caller = caller_of(request)
        with self.tenancy.admit(self.tm, request, *work_of(req.prompts, req.params)):
            tenant = caller if identity_of(request).tenant is not None else None
            await self.grammar.check(req.params, tenant)
            explained = None
            if req.explain and not req.stream:
                explained = await explain_prompts(
                    self.tm, self.tenancy, request, req.prompts, namespace
                )
            turn: Turn | None = None  # a chat turn the prompt guard follows
            if req.messages is not None and session and len(req.prompts) == 1:
                turn = ((caller, session), req.messages, req.prompts[0])
                self.guard.check(*turn)
            states = self.tm.submit(
                req.prompts,
                req.params,
                req.rids,
                namespace,
                session=session,
                caller=caller,
                endpoint=request.url.path,
                pins=pins or None,
            )
        return states, explained, turn

    def _keep(self, owner: str, record: PromptRecord | None) -> None:
        """Keep an answered call's fingerprint, for a later call to be compared with."""
        if record is not None:
            self.fingerprints.put(owner, record.response_id, record.fingerprint)

    def _keep_turn(self, owner: str, req: ServeRequest, states: list[ReqState]) -> None:
        """Keep an answered chat turn's ids, for a next turn that replays it as text."""
        if req.prompt_text is not None and len(states) == 1 and states[0].out.output_ids:
            ids = states[0].out.output_ids
            self.continuations.put(owner, req.prompt_text, req.prompts[0], ids, self.tm.tokenizer)

    async def _stream(
        self,
        states: list[ReqState],
        render: BaseRender,
        turn: Turn | None,
        kept: tuple[str, ServeRequest],
    ) -> AsyncIterator[bytes]:
        """The stream of one call; however it ends, its unfinished requests are aborted."""
        try:
            for event in render.head(states):
                yield event
            async for _ in updates(states):
                for i, state in enumerate(states):
                    delta = state.take_delta() if render.every_token else state.take_text_delta()
                    if delta is not None:
                        for event in render.delta(i, state, delta):
                            yield event
            for event in render.tail(states):
                yield event
        except SchedulerDeadError as e:
            yield render.error(str(e), 503)
        except RequestFailedError as e:
            yield render.error(str(e), e.status_code)
        finally:
            self.tm.abort(states)  # a no-op for the finished ones
        if states[0].out.is_finished:
            if turn is not None:
                self.guard.record(*turn, states[0].out.output_ids)
            self._keep(kept[0], kept[1].record)
            self._keep_turn(*kept, states)
        for event in render.close():
            yield event


def _whole(state: ReqState) -> OutputDelta:
    """A finished request's whole output as one delta."""
    delta = state.take_delta()
    assert delta is not None and delta.is_last, "taken before its request finished"
    return delta
