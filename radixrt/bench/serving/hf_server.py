"""`python -m radixrt.bench.serving.hf_server`: transformers `generate` behind a minimal OpenAI API.

The peer for the serving and program benchmarks: /v1/completions (streamed or not) and
/v1/models. One request at a time, float32, greedy unless temperature > 0, transformers'
own per-request KV cache and nothing shared across requests (cached_tokens is always 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import torch
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from radixrt.bench.micro.hf_peer import load_hf_model

_NO_EOS = -1  # as in hf_peer: EOS may be generated but does not stop the request


class _Stream:
    """transformers streamer: new token ids go to an asyncio queue; `stop` ends generation."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[list[int] | None] = asyncio.Queue()
        self.stop = threading.Event()
        self._first = True

    def put(self, value: torch.Tensor) -> None:
        if self._first:  # generate() hands the prompt to the streamer first
            self._first = False
            return
        self.loop.call_soon_threadsafe(self.queue.put_nowait, value.reshape(-1).tolist())

    def end(self) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kw: Any) -> torch.Tensor:
        """StoppingCriteria: True (per row) once `stop` is set."""
        return torch.full((input_ids.shape[0],), self.stop.is_set(), dtype=torch.bool)


class HFServer:
    """Runs one `generate` at a time; holds the model and tokenizer."""

    def __init__(self, model_path: str | None, model_name: str) -> None:
        from radixrt.models.loader import eos_token_ids, load_tokenizer, resolve_model_path

        folder = resolve_model_path(model_path)
        self.model = load_hf_model(folder)
        self.tokenizer = load_tokenizer(folder)
        self.eos = eos_token_ids(folder, self.tokenizer)
        self.model_name = model_name
        self.lock = asyncio.Lock()

    async def complete(self, body: dict[str, Any]) -> AsyncIterator[tuple[str, dict | None]]:
        """Yields (text delta, None) per new token, then ("", usage) with the finish reason."""
        prompt = body["prompt"]
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_tokens = int(body.get("max_tokens") or 16)
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        temperature = float(body.get("temperature", 1.0) or 0.0)
        async with self.lock:
            stream = _Stream(asyncio.get_running_loop())
            kwargs = self._generate_kwargs(ids, max_tokens, temperature, stream, body)
            task = asyncio.create_task(asyncio.to_thread(self._run, kwargs, stream))
            out: list[int] = []
            text, reason = "", "length"
            try:
                async for new in _drain(stream):
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
                    if new[-1] in self.eos and not body.get("ignore_eos"):
                        reason = "stop"
            finally:  # also when the client goes away: generate stops within one step
                stream.stop.set()
            async for _ in _drain(stream):
                pass
            await task
        yield (
            "",
            {
                "finish_reason": reason,
                "prompt_tokens": len(ids),
                "completion_tokens": len(out),
                "prompt_tokens_details": {"cached_tokens": 0},
            },
        )

    def _generate_kwargs(
        self,
        ids: list[int],
        max_tokens: int,
        temperature: float,
        stream: _Stream,
        body: dict[str, Any],
    ) -> dict[str, Any]:
        from transformers import StoppingCriteriaList

        sample = temperature > 0
        return dict(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=None,
            top_k=None,
            eos_token_id=_NO_EOS if body.get("ignore_eos") else self.eos,
            pad_token_id=self.eos[0] if self.eos else 0,
            streamer=stream,
            stopping_criteria=StoppingCriteriaList([stream]),
        )

    @torch.inference_mode()
    def _run(self, kwargs: dict[str, Any], stream: _Stream) -> None:
        try:
            self.model.generate(**kwargs)
        finally:
            stream.end()


async def _drain(stream: _Stream) -> AsyncIterator[list[int]]:
    """The streamer's token-id lists until generate ends."""
    while (new := await stream.queue.get()) is not None:
        yield new


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
    p = argparse.ArgumentParser(
        prog="python -m radixrt.bench.serving.hf_server", description=__doc__
    )
    p.add_argument("--model-path", default=None)
    p.add_argument("--model-name", default="transformers")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30100)
    args = p.parse_args(argv)
    import uvicorn

    uvicorn.run(
        create_app(HFServer(args.model_path, args.model_name)),
        host=args.host,
        port=args.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
