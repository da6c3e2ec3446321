"""`python -m benchmarks hf_server`: transformers `generate` behind a minimal OpenAI API.

The peer for the serving and program benchmarks: /v1/completions (streamed or not) and
/v1/models. Requests are batched the way transformers can batch: the requests waiting when a
`generate` call starts run together in it (left-padded, up to --max-batch, grouped by
temperature), each streamed as its tokens come and finished on its own (its max_tokens, its
stop strings, EOS unless ignore_eos); requests arriving meanwhile wait for the next call.
float32, greedy unless temperature > 0, transformers' own KV cache and nothing shared across
requests (cached_tokens is always 0). `--max-batch 1` serves one request at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import torch
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from benchmarks.peers.hf_peer import load_hf_model

_NO_EOS = -1  # EOS never stops generate itself: each row's end is decided per row below
MAX_BATCH = 32


@dataclass
class _Row:
    """One request in a batch: its tokens go to `queue` (None at the end)."""

    ids: list[int]
    max_tokens: int
    temperature: float
    stop_on_eos: bool
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    stop: threading.Event = field(default_factory=threading.Event)  # the client is done
    finished: bool = False  # no more tokens for this row (set by the generating thread)
    count: int = 0

    def push(self, value: list[int] | None) -> None:
        """Hand tokens to the row's client; dropped once the server's loop has closed (the
        server is shutting down and nobody reads them)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.queue.put_nowait, value)


class _BatchStream:
    """Streamer and StoppingCriteria of one batched generate: step tokens go to their rows."""

    def __init__(self, rows: list[_Row], eos: list[int]) -> None:
        self.rows, self.eos = rows, set(eos)
        self._first = True

    def put(self, value: torch.Tensor) -> None:
        if self._first:  # generate() hands the prompts to the streamer first
            self._first = False
            return
        for row, tok in zip(self.rows, value.reshape(-1).tolist()):
            if row.finished or row.stop.is_set():
                row.finished = True
                continue
            row.push([tok])
            row.count += 1
            row.finished = row.count >= row.max_tokens or (row.stop_on_eos and tok in self.eos)

    def end(self) -> None:
        for row in self.rows:
            row.push(None)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kw: Any) -> torch.Tensor:
        return torch.tensor([r.finished or r.stop.is_set() for r in self.rows], dtype=torch.bool)


class HFServer:
    """Holds the model and tokenizer; one thread runs the batched `generate` calls."""

    def __init__(self, model_path: str | None, model_name: str, max_batch: int = MAX_BATCH) -> None:
        from radixrt.model.families.loader import eos_token_ids, load_tokenizer, resolve_model_path

        folder = resolve_model_path(model_path)
        self.model = load_hf_model(folder)
        self.tokenizer = load_tokenizer(folder)
        self.eos = eos_token_ids(folder, self.tokenizer)
        self.model_name = model_name
        self.max_batch = max_batch
        self._pending: list[_Row] = []
        self._ready = threading.Condition()
        threading.Thread(target=self._serve, daemon=True, name="hf-generate").start()

    async def complete(self, body: dict[str, Any]) -> AsyncIterator[tuple[str, dict | None]]:
        """Yields (text delta, None) per new token, then ("", usage) with the finish reason."""
        prompt = body["prompt"]
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        row = _Row(
            ids,
            max(1, int(body.get("max_tokens") or 16)),
            float(body.get("temperature", 1.0) or 0.0),
            not body.get("ignore_eos"),
            asyncio.get_running_loop(),
        )
        with self._ready:
            self._pending.append(row)
            self._ready.notify()
        out: list[int] = []
        text, reason = "", "length"
        try:
            while (new := await row.queue.get()) is not None:
                out.extend(new)
                full = self.tokenizer.decode(out, skip_special_tokens=True)
                hit = min((i for s in stops if (i := full.find(s)) >= 0), default=-1)
                if hit >= 0:
                    full, reason = full[:hit], "stop"
                if not full.endswith("\ufffd") and not (reason == "stop" and full == text):
                    yield full[len(text) :], None
                    text = full
                if reason == "stop":
                    break
                if new[-1] in self.eos and row.stop_on_eos:
                    reason = "stop"
        finally:  # also when the client goes away: its row stops within one step
            row.stop.set()
        yield (
            "",
            {
                "finish_reason": reason,
                "prompt_tokens": len(ids),
                "completion_tokens": len(out),
                "prompt_tokens_details": {"cached_tokens": 0},
            },
        )

    def _take(self) -> list[_Row]:
        """The next batch: waiting rows of the first one's temperature, up to max_batch."""
        with self._ready:
            while not self._pending:
                self._ready.wait()
            t = self._pending[0].temperature
            batch = [r for r in self._pending if r.temperature == t][: self.max_batch]
            self._pending = [r for r in self._pending if r not in batch]
        return batch

    def _serve(self) -> None:
        while True:
            rows = self._take()
            stream = _BatchStream(rows, self.eos)
            try:
                self._generate(rows, stream)
            except Exception as e:  # a failed call ends its rows; the server goes on
                print(f"generate failed: {type(e).__name__}: {e}", flush=True)
            finally:
                stream.end()

    @torch.inference_mode()
    def _generate(self, rows: list[_Row], stream: _BatchStream) -> None:
        from transformers import StoppingCriteriaList

        width = max(len(r.ids) for r in rows)
        pad = self.eos[0] if self.eos else 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: every row's last token in the last column
            ids[i, width - len(r.ids) :] = torch.tensor(r.ids)
            mask[i, width - len(r.ids) :] = 1
        t = rows[0].temperature
        self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max(r.max_tokens for r in rows),
            do_sample=t > 0,
            temperature=t if t > 0 else None,
            top_p=None,
            top_k=None,
            eos_token_id=_NO_EOS,
            pad_token_id=pad,
            streamer=stream,
            stopping_criteria=StoppingCriteriaList([stream]),
        )


def create_app(server: HFServer) -> FastAPI:
    """FastAPI app with /health, /v1/models and /v1/completions."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [{"id": server.model_name}]})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await request.json()
        head = {
            "id": f"cmpl-{time.monotonic_ns()}",
            "object": "text_completion",
            "model": server.model_name,
        }
        if body.get("stream"):
            return StreamingResponse(_sse(server, body, head), media_type="text/event-stream")
        text, usage = "", {}
        async for delta, final in server.complete(body):
            text += delta
            usage = final or usage
        reason = usage.pop("finish_reason")
        return JSONResponse(
            {
                **head,
                "usage": usage,
                "choices": [{"index": 0, "text": text, "finish_reason": reason}],
            }
        )

    return app


async def _sse(
    server: HFServer, body: dict[str, Any], head: dict[str, Any]
) -> AsyncIterator[bytes]:
    async for delta, final in server.complete(body):
        if final is None:
            choice = {"index": 0, "text": delta, "finish_reason": None}
            yield f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode()
            continue
        reason = final.pop("finish_reason")
        choice = {"index": 0, "text": "", "finish_reason": reason}
        yield f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode()
        yield f"data: {json.dumps({**head, 'choices': [], 'usage': final})}\n\n".encode()
    yield b"data: [DONE]\n\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks hf_server", description=__doc__)
    p.add_argument("--model-path", default=None)
    p.add_argument("--model-name", default="transformers")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30100)
    p.add_argument("--max-batch", type=int, default=MAX_BATCH, help="requests per generate call")
    args = p.parse_args(argv)
    import uvicorn

    uvicorn.run(
        create_app(HFServer(args.model_path, args.model_name, args.max_batch)),
        host=args.host,
        port=args.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
