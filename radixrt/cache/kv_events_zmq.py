"""The ZMQ side of KV events: a PUB socket and a replay socket, as vLLM and SGLang serve them.

Each batch goes out as three frames, `[topic, seq, payload]`: seq an 8-byte big-endian count
from 0, payload the msgpack KVEventBatch (kv_events.py). The last `buffer_steps` batches are
kept; a subscriber that sees a gap (or joins late) sends an 8-byte big-endian start seq to the
replay socket (ROUTER; a REQ or DEALER peer) and gets `[seq, payload]` for every kept batch
from there on, then `[-1 as 8 signed bytes, b""]`.

The sockets live on one thread of their own: the scheduler's `send` only queues the batch.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque

import msgspec

from radixrt.cache.kv_event_schema import END_SEQ, KVEventBatch
from radixrt.core.config import KVEventsConfig

logger = logging.getLogger("radixrt")

POLL_S = 0.05


class ZmqEventPublisher:
    """Publishes batches on `config.endpoint` and answers replays on `config.replay_endpoint`;
    ValueError when an endpoint cannot be bound."""

    def __init__(self, config: KVEventsConfig, rank: int = 0) -> None:
        import zmq

        self._zmq = zmq
        self.topic = config.topic.encode()
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay = None
        self.endpoint, replay_endpoint = config.endpoints_for(rank)  # --dp: replica `rank`
        try:
            self._pub.bind(self.endpoint)
            if replay_endpoint:
                self.replay_endpoint = replay_endpoint
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.bind(self.replay_endpoint)
        except zmq.ZMQError as e:
            self._ctx.destroy(linger=0)
            raise ValueError(f"--kv-events-config: cannot bind ({e})") from e
        self._encoder = msgspec.msgpack.Encoder()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._seq = 0
        self._queue: queue.Queue[KVEventBatch | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="radixrt-kv-events", daemon=True)
        self._thread.start()
        logger.info("KV events on %s (replay %s), topic %r", self.endpoint,
                    config.replay_endpoint and self.replay_endpoint, config.topic)  # fmt: skip

    def send(self, batch: KVEventBatch) -> None:
        self._queue.put(batch)

    def close(self) -> None:
        """Send what is queued, then close the sockets."""
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        zmq = self._zmq
        poller = zmq.Poller()
        if self._replay is not None:
            poller.register(self._replay, zmq.POLLIN)
        try:
            while True:
                if self._replay is not None and poller.poll(0):
                    self._answer_replay()
                try:
                    batch = self._queue.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if batch is None:
                    return
                payload = self._encoder.encode(batch)
                seq = self._seq.to_bytes(8, "big")
                self._pub.send_multipart((self.topic, seq, payload))
                self._buffer.append((self._seq, payload))
                self._seq += 1
        except Exception:  # the scheduler must not die with its publisher
            logger.exception("KV events publisher stopped")
        finally:
            self._ctx.destroy(linger=0)

    def _answer_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        client, start_raw = frames[0], frames[-1]
        if len(start_raw) != 8:
            self._replay.send_multipart((client, b"", END_SEQ, b""))
            return
        start = int.from_bytes(start_raw, "big")
        for seq, payload in list(self._buffer):
            if seq >= start:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", END_SEQ, b""))
