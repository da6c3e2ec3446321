"""KVEventFeed: the router's `--kv-events` mode. It follows every worker's KV events
(radixrt/cache/kv_events_zmq.py) and keeps one BlockIndex per worker (routing/block_index.py),
which the cache_aware policy matches prompts against instead of its own guesses.

Per worker, a task: ask `/get_server_info` for its `--kv-events-config` and `--dp` (retried
until the worker answers), then one subscription per replica, each on its own SUB socket:
first a replay from seq 0 (the router may start after the worker), then the live stream,
asking for a replay again on a gap. A seq that goes back (not one the replay already gave)
means the worker restarted: that replica's blocks are dropped and replayed afresh. A worker
without KV events is routed by guesses, as without `--kv-events`.

Endpoints bound to every interface (`*`, 0.0.0.0) are reached at the worker URL's host.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec

from radixrt.cache.kv_event_schema import END_SEQ, KVEventBatch
from radixrt.core.config import KVEventsConfig
from radixrt.serve.placement.block_index import BlockIndex, prompt_blocks
from radixrt.serve.placement.policy import RouteRequest
from radixrt.serve.router.prompt_ids import PromptTokenizer

logger = logging.getLogger("radixrt.serve.router")

RETRY_S = 2.0  # between tries to read a worker's configuration
REPLAY_TIMEOUT_MS = 5000
GUESS_ONLY_TTL_S = 3600.0  # a worker without KV events: the router's guesses, kept an hour


class KVEventFeed:
    """The workers' KV events as one BlockIndex per worker URL."""

    def __init__(
        self,
        urls: list[str],
        client: httpx.AsyncClient,
        headers: dict[str, str],
        tokenizer_path: str | None,
    ) -> None:
        import zmq.asyncio

        self.urls = urls
        self.client = client
        self.headers = headers
        self.tokenizer_path = tokenizer_path
        self.tokenizer: PromptTokenizer | None = None
        self.block_size: int | None = None  # the first worker's; all should agree
        self.indexes = {url: BlockIndex() for url in urls}
        self.status = {url: "waiting for the worker" for url in urls}
        self.replays = dict.fromkeys(urls, 0)
        self._ctx = zmq.asyncio.Context()
        self._decoder = msgspec.msgpack.Decoder(KVEventBatch)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="radixrt-router-tokenize")
        self._tasks: list[asyncio.Task[None]] = []
        self._tokenizer_task: asyncio.Task[None] | None = None

    def index_for(self, worker_id: str) -> BlockIndex:
        """The policy's index of a worker (the same object for the feed's lifetime)."""
        return self.indexes.setdefault(worker_id, BlockIndex())

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._guarded(url)) for url in self.urls]

    async def _guarded(self, url: str) -> None:
        """Follow `url`; a failure leaves that worker to guesses, never the router down."""
        try:
            await self._follow(url)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.exception("--kv-events: stopped following %s", url)
            self.status[url] = f"failed: {type(e).__name__}: {e} (routed by guesses)"
            index = self.indexes[url]
            index.sources.clear()  # no longer followed: what it said may go stale
            index.guess_ttl_s = GUESS_ONLY_TTL_S

    async def close(self) -> None:
        tasks = [*self._tasks, *([self._tokenizer_task] if self._tokenizer_task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._ctx.destroy(linger=0)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def route(
        self, path: str, body: Any, session: str | None, namespace: str | None
    ) -> RouteRequest:
        """The request keyed by its prompt's block hashes in `namespace` (empty while the
        tokenizer or the block size is not known yet, or for a body without a prompt)."""
        if self._tokenizer_task is not None and not self._tokenizer_task.done():
            await asyncio.shield(self._tokenizer_task)  # the first requests wait for the load
        tokenizer, block_size = self.tokenizer, self.block_size
        if tokenizer is None or block_size is None:
            return RouteRequest((), session)
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(self._pool, tokenizer.ids, path, body)
        return RouteRequest(prompt_blocks(ids, namespace, block_size), session)

    def stats(self) -> dict[str, Any]:
        return {
            url: {
                **self.indexes[url].stats(),
                "status": self.status[url],
                "replays": self.replays[url],
            }  # fmt: skip
            for url in self.urls
        }

    # ---- per worker ----------------------------------------------------------------------

    async def _follow(self, url: str) -> None:
        info = await self._server_info(url)
        raw = info.get("cache_config", {}).get("kv_events_config")
        config = KVEventsConfig.parse(raw) if raw else None
        if config is None or not config.enable_kv_cache_events or config.publisher != "zmq":
            self.status[url] = "no KV events (routed by guesses)"
            logger.warning("worker %s publishes no KV events; routing to it by guesses", url)
            self.indexes[url].guess_ttl_s = GUESS_ONLY_TTL_S
            return
        if self.block_size is None:
            self.block_size = config.block_size
        if self._tokenizer_task is None:  # one load for every worker, beside the subscriptions
            self._tokenizer_task = asyncio.create_task(self._load_tokenizer(url))
        dp = int(info.get("server_config", {}).get("dp_size", 1))
        host = urlsplit(url).hostname or "127.0.0.1"
        subs = []
        for rank in range(dp):
            pub, replay = (_reach(e, host) for e in config.endpoints_for(rank))
            subs.append(self._subscribe(url, f"{rank}", pub, replay))  # type: ignore[arg-type]
        self.status[url] = "following"
        await asyncio.gather(*subs)

    async def _server_info(self, url: str) -> dict[str, Any]:
        while True:
            try:
                r = await self.client.get(url + "/get_server_info", headers=self.headers)
                if r.status_code == 200:
                    return dict(r.json())
                status = f"/get_server_info answered {r.status_code}"
                if status != self.status[url]:  # a refused key is logged, never silent
                    logger.warning("--kv-events: worker %s: %s", url, status)
                self.status[url] = status
            except (httpx.HTTPError, ValueError) as e:
                self.status[url] = f"waiting for the worker ({type(e).__name__})"
            await asyncio.sleep(RETRY_S)

    async def _load_tokenizer(self, url: str) -> None:
        try:
            path = self.tokenizer_path
            if path is None:
                r = await self.client.get(url + "/get_model_info", headers=self.headers)
                path = r.json().get("model_path")
            loop = asyncio.get_running_loop()
            self.tokenizer = await loop.run_in_executor(self._pool, PromptTokenizer, str(path))
        except Exception as e:
            logger.error("--kv-events: cannot load the tokenizer (%s); routing by load", e)

    async def _subscribe(self, url: str, source: str, pub: str, replay: str | None) -> None:
        import zmq

        index = self.indexes[url]
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(pub)
        try:
            last = await self._replay(url, source, replay, 0, -1)
            replayed = last
            while True:
                frames = await sub.recv_multipart()
                if len(frames) != 3 or len(frames[1]) != 8:
                    continue
                seq = int.from_bytes(frames[1], "big")
                if seq <= last:
                    if seq <= replayed:
                        continue  # the replay gave it already
                    logger.info("worker %s replica %s restarted its KV events", url, source)
                    index.drop_source(source)
                    last = replayed = await self._replay(url, source, replay, 0, -1)
                    if seq <= last:
                        continue
                elif seq > last + 1 and replay is not None:
                    last = replayed = await self._replay(url, source, replay, last + 1, last)
                    if seq <= last:
                        continue
                self._apply(index, source, frames[2])
                last = seq
        finally:
            sub.close(0)

    async def _replay(self, url: str, source: str, endpoint: str | None, start: int,
                      last: int) -> int:  # fmt: skip
        """Apply the replica's kept batches from `start`; the last seq applied (`last` when
        nothing came)."""
        if endpoint is None:
            return last
        import zmq

        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        index = self.indexes[url]
        try:
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            while await dealer.poll(REPLAY_TIMEOUT_MS):
                frames = await dealer.recv_multipart()
                if len(frames) != 3 or frames[1] == END_SEQ:
                    break
                seq = int.from_bytes(frames[1], "big")
                if seq > last:
                    self._apply(index, source, frames[2])
                    last = seq
            self.replays[url] += 1
        finally:
            dealer.close(0)
        return last

    def _apply(self, index: BlockIndex, source: str, payload: bytes) -> None:
        try:
            batch = self._decoder.decode(payload)
        except msgspec.DecodeError:
            logger.warning("dropped an undecodable KV event batch from replica %s", source)
            return
        index.apply(source, batch)


def _reach(endpoint: str | None, host: str) -> str | None:
    """`endpoint` with a bind-everything host replaced by the worker's host."""
    if endpoint is None or not endpoint.startswith("tcp://"):
        return endpoint
    bind_host, _, port = endpoint[len("tcp://") :].rpartition(":")
    if bind_host in ("*", "0.0.0.0", "::", "[::]"):
        return f"tcp://{host}:{port}"
    return endpoint
