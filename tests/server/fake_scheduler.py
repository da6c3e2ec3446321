"""An in-process app over a TokenizerManager whose scheduler is a stand-in: each request's
output is its prompt's ids again, cycled, one token per step, up to max_new_tokens (logprobs
when asked: -0.5 for the token and its top alternatives; the prompt's, -1.0 each, come at the
finish of a request that asks for them, after a short delay that stands for computing them);
a prompt starting with "!" fails with a 500 of its own after its first token. Pins are made
as asked; an explanation is "never_seen" after a few steps. No model, no KV pool: a test ends
by checking that nothing is left in flight on either side."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from fastapi import FastAPI

from radixrt.core import PinOutcome
from radixrt.core.config import ModelConfig, SchedulerConfig, ServerConfig
from radixrt.core.config.cache import CacheConfig
from radixrt.core.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    ExplainReplyMsg,
    ExplainReqMsg,
    FinishMsg,
    GenerateReqMsg,
    ReadyMsg,
    ReqOutMsg,
)
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.args import ServerArgs
from radixrt.serve.http.cache_handles import CacheRegistry
from radixrt.serve.http.grammar_check import GrammarChecker
from radixrt.serve.http.http_errors import add_error_handlers
from radixrt.serve.http.metrics import NoMetrics
from radixrt.serve.http.protocol import Limits
from radixrt.serve.http.serving import ServingPipeline
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.http.tokenizer_manager import TokenizerManager

READY = ReadyMsg("fake", 4096, 0, 1024, 0x110000, "cpu", "float32")


class CharTokenizer:
    """One token per character: its code point."""

    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(map(chr, ids))


class FakeScheduler:
    """The SchedulerClient interface, answered in-process."""

    def __init__(self) -> None:
        self.outputs: asyncio.Queue[Any] = asyncio.Queue()
        self.running: dict[str, asyncio.Task[None]] = {}
        self.received: list[GenerateReqMsg] = []  # every request sent to it
        self.most_running = 0  # requests and explanations at once, at most so far
        self._explaining = 0
        # Requests whose prompt starts with "~" wait for this before their first token (a
        # request that is still running, however fast the machine).
        self.release = asyncio.Event()
        self._decoder = msgspec.msgpack.Decoder(GenerateReqMsg | AbortReqMsg | ExplainReqMsg)

    def encode(self, msg: Any) -> bytes:
        return msgspec.msgpack.encode(msg)

    def send(self, msg: Any) -> None:
        self.send_encoded(self.encode(msg))

    def send_encoded(self, buf: bytes) -> None:
        msg = self._decoder.decode(buf)
        if isinstance(msg, ExplainReqMsg):
            self._explaining += 1
            self._count_running()
            asyncio.create_task(self._explain(msg))
        elif isinstance(msg, GenerateReqMsg):
            self.received.append(msg)
            self.running[msg.rid] = asyncio.create_task(self._run(msg))
            self._count_running()
        elif (task := self.running.pop(msg.rid, None)) is not None:
            task.cancel()
            self._put(msg.rid, [], FinishMsg("abort", message="aborted"))

    def _count_running(self) -> None:
        self.most_running = max(self.most_running, len(self.running) + self._explaining)

    async def _explain(self, msg: ExplainReqMsg) -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        self._explaining -= 1
        self.outputs.put_nowait(ExplainReplyMsg(msg.reply_id, "never_seen", len(msg.input_ids), 0))

    async def recv(self) -> Any:
        return await self.outputs.get()

    async def wait_exit(self) -> int:
        await asyncio.Event().wait()  # never exits
        return 0

    def last_beat(self) -> float:
        return time.monotonic()  # always beating: the stall watch never fires

    async def _run(self, msg: GenerateReqMsg) -> None:
        sp = msg.sampling_params
        num = sp.max_new_tokens
        if sp.return_logprob and sp.logprob_start_len >= 0:
            await asyncio.sleep(0.01)  # the prompt's logprobs: samples without them end first
        if msg.input_ids[:1] == [ord("~")]:
            await self.release.wait()
        for k in range(num):
            await asyncio.sleep(0)
            finish = FinishMsg("length") if k == num - 1 else None
            if k == 1 and msg.input_ids[0] == ord("!"):
                finish = FinishMsg("abort", message="boom", status_code=500)
            self._put(msg.rid, [msg.input_ids[k % len(msg.input_ids)]], finish, sp, msg)
            if finish is not None:
                break
        if num == 0:
            for _ in range(5):  # the prompt's prefill
                await asyncio.sleep(0)
            self._put(msg.rid, [], FinishMsg("length"), sp, msg)
        self.running.pop(msg.rid, None)

    def _put(
        self, rid: str, ids: list[int], finish: FinishMsg | None, sp: Any = None, msg: Any = None
    ) -> None:
        logprobs = ids and sp is not None and sp.return_logprob
        tops = [[(-0.5, t)] * sp.top_logprobs_num for t in ids] if logprobs else []
        out = ReqOutMsg(rid, ids, [-0.5] * len(ids) if logprobs else [], tops, finish, 0)
        if finish is not None and msg is not None:
            out.pins = [PinOutcome(p.offset, True, p.offset, p.offset, 0.0, p.pin_id or "")
                        for p in msg.pins]  # fmt: skip
        if finish is not None and logprobs and sp.logprob_start_len >= 0:
            num = len(msg.input_ids) - sp.logprob_start_len
            out.input_logprobs = [-1.0] * num
            out.input_top_logprobs = [[(-1.0, t)] * sp.top_logprobs_num for t in range(num)]
        self.outputs.put_nowait(BatchTokenOutMsg([out], len(self.running), 0))


def make_app(
    tenancy: Tenancy | None = None, config: ServerConfig | None = None
) -> tuple[FastAPI, ApiContext, FakeScheduler]:
    """An app with the error handlers and nothing else; call on the running event loop."""
    scheduler, tokenizer = FakeScheduler(), CharTokenizer()
    config = config or ServerConfig()
    tenancy = tenancy or Tenancy(None)
    tm = TokenizerManager(scheduler, tokenizer, READY, config, NoMetrics(),  # type: ignore[arg-type]
                          [tenancy.usage])  # fmt: skip
    tm.start(lambda reason: None)
    grammar = GrammarChecker(SchedulerConfig(), tokenizer, READY)
    args = ServerArgs(ModelConfig("fake"), CacheConfig(), SchedulerConfig(), config)
    limits = Limits(READY.context_length, READY.max_total_tokens, READY.vocab_size, 10**6, config)
    pipeline = ServingPipeline(tm, tenancy, grammar)
    ctx = ApiContext(tm, args, limits, tenancy, CacheRegistry(tm), pipeline, "fake")
    app = FastAPI()
    add_error_handlers(app)
    return app, ctx, scheduler
