"""KV events: a subscriber rebuilds the tree's set of cached blocks from the ZMQ stream after a
mixed workload with evictions, namespaces and a flush; one that joins late catches up through
replay; the batches decode with the plain vLLM schema; bad configs are refused by name."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
from conftest import assert_pool_whole

from radixrt.cache.blocks import blocks_ending_in, chain_hashes, root_hash
from radixrt.cache.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    block_hash,
)
from radixrt.core.config import CacheConfig
from radixrt.serve.engine import Engine

BLOCK = 16


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(pub: int, replay: int) -> str:
    return msgspec.json.encode({"endpoint": f"tcp://127.0.0.1:{pub}",
                                "replay_endpoint": f"tcp://127.0.0.1:{replay}",
                                "block_size": BLOCK}).decode()  # fmt: skip


class Rebuilt:
    """The set of (namespace, block hash) a subscriber holds after applying batches."""

    def __init__(self) -> None:
        self.blocks: set[tuple[str | None, int]] = set()
        self.seqs: list[int] = []
        self.namespaces: set[str | None] = set()

    def apply(self, seq: int, payload: bytes) -> None:
        batch = msgspec.msgpack.decode(payload, type=KVEventBatch)
        self.seqs.append(seq)
        for ev in batch.events:
            if isinstance(ev, BlockStored):
                assert (
                    len(ev.token_ids)
                    == len(ev.block_hashes) * ev.block_size
                    == len(ev.block_hashes) * BLOCK
                )
                self.namespaces.add(ev.namespace)
                self.blocks |= {(ev.namespace, h) for h in ev.block_hashes}
            elif isinstance(ev, BlockRemoved):
                gone = {(ev.namespace, h) for h in ev.block_hashes}
                assert gone <= self.blocks, "removed a block never stored"
                self.blocks -= gone
            else:
                assert isinstance(ev, AllBlocksCleared)
                self.blocks.clear()


def _tree_blocks(engine: Engine) -> set[tuple[str | None, int]]:
    """The whole blocks of every cached path, hashed as the events hash them."""
    cache = engine.scheduler.kv.cache
    out = set()
    for node in cache._nodes():
        if node is cache.root:
            continue
        parts, cur = [], node
        while cur.parent is not None:
            parts.append(cur.key)
            cur = cur.parent
        tokens = [t for p in reversed(parts) for t in p]
        blocks = blocks_ending_in(len(tokens) - len(node.key), len(tokens), BLOCK)
        hashes = chain_hashes(tokens, BLOCK, root_hash(b"", node.extra_key), blocks.stop)
        out |= {(node.extra_key, block_hash(hashes[i])) for i in blocks}
    return out


def _subscribe(port: int, rebuilt: Rebuilt, stop: threading.Event) -> threading.Thread:
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv-events")

    def run() -> None:
        while not stop.is_set():
            if sub.poll(50):
                topic, seq, payload = sub.recv_multipart()
                rebuilt.apply(int.from_bytes(seq, "big"), payload)
        sub.close(0)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _replay(port: int, start: int) -> list[tuple[int, bytes]]:
    ctx = zmq.Context.instance()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    got = []
    while dealer.poll(5000):
        _, seq, payload = dealer.recv_multipart()
        if not payload:
            assert int.from_bytes(seq, "big", signed=True) == -1
            break
        got.append((int.from_bytes(seq, "big"), payload))
    dealer.close(0)
    return got


def _wait_for(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _in_subprocess(scenario: str, *args: str) -> None:
    """Run `scenario(*args)` of this file in a fresh interpreter: the ZMQ sockets and contexts
    of the publisher and the subscribers live and die there, never in the test process."""
    here = Path(__file__).resolve()
    code = (f"import sys; sys.path[:0] = [{str(here.parents[1])!r}, {str(here.parent)!r}]; "
            f"import test_kv_events as t; t.{scenario}(*sys.argv[1:])")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.parametrize("page_size", [1, 8])
def test_subscriber_rebuilds_the_tree_and_late_joiner_replays(tiny_llama_path, page_size) -> None:
    _in_subprocess("rebuild_scenario", str(tiny_llama_path), str(page_size))


def rebuild_scenario(tiny_llama_path: str, page_size_text: str) -> None:
    page_size = int(page_size_text)
    pub, replay = _port(), _port()
    rebuilt, stop = Rebuilt(), threading.Event()
    with Engine(str(tiny_llama_path), max_total_tokens=512, page_size=page_size,
                kv_events_config=_config(pub, replay)) as eng:  # fmt: skip
        thread = _subscribe(pub, rebuilt, stop)
        time.sleep(0.3)  # a SUB socket misses what is sent before it has joined
        rng = random.Random(0)
        shared = {ns: [rng.randrange(100, 40000) for _ in range(70)] for ns in (None, "t1")}
        sp = {"max_new_tokens": 3, "temperature": 0}
        for i in range(30):  # ~3000 tokens through a 512-token pool: evictions
            ns = rng.choice([None, "t1"])
            prompt = shared[ns] + [rng.randrange(100, 40000) for _ in range(rng.randrange(1, 60))]
            eng.generate(input_ids=prompt, sampling_params=sp, extra_key=ns)
            if i == 20:
                assert eng.flush_cache()
        _wait_for(lambda: rebuilt.blocks == _tree_blocks(eng))
        assert len(rebuilt.blocks) > 10 and rebuilt.namespaces == {None, "t1"}
        assert rebuilt.seqs == list(range(rebuilt.seqs[0], rebuilt.seqs[0] + len(rebuilt.seqs)))
        late = Rebuilt()
        for seq, payload in _replay(replay, 0):
            late.apply(seq, payload)
        assert late.blocks == rebuilt.blocks and late.seqs[0] == 0
        tail = _replay(replay, late.seqs[-1])
        assert [s for s, _ in tail] == [late.seqs[-1]]
        stop.set()
        thread.join()
        assert_pool_whole(eng)


class PlainStored(msgspec.Struct, array_like=True, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class PlainRemoved(msgspec.Struct, array_like=True, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class PlainCleared(msgspec.Struct, array_like=True, tag="AllBlocksCleared"):
    pass


class PlainBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[PlainStored | PlainRemoved | PlainCleared]


def test_batches_decode_with_the_plain_schema() -> None:
    batch = KVEventBatch(1.5, [BlockStored([1, 2], None, list(range(32)), 16, None, "CPU", "t"),
                               BlockRemoved([2], "CPU"), AllBlocksCleared()])  # fmt: skip
    plain = msgspec.msgpack.decode(msgspec.msgpack.encode(batch), type=PlainBatch)
    stored, removed, cleared = plain.events
    assert isinstance(stored, PlainStored) and stored.block_hashes == [1, 2]
    assert stored.parent_block_hash is None and stored.medium == "CPU"
    assert isinstance(removed, PlainRemoved) and isinstance(cleared, PlainCleared)
    raw = msgspec.msgpack.decode(msgspec.msgpack.encode(batch))
    assert raw[1][0][:7] == ["BlockStored", [1, 2], None, list(range(32)), 16, None, "CPU"]
    assert raw[1][0][7] == "t"  # the namespace: one trailing field, which plain decoders skip


@pytest.mark.parametrize(
    "text, match",
    [
        ("{", "not JSON"),
        ("[]", "JSON object"),
        ('{"port": 1}', "unknown key 'port'"),
        ('{"block_size": "16"}', "block_size must be int"),
        ('{"block_size": 0}', "block_size"),
        ('{"publisher": "kafka"}', "publisher"),
        ('{"block_size": 12}', "multiple of page_size"),
    ],
)
def test_bad_configs_are_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CacheConfig(kv_events_config=text, page_size=8)


def test_an_endpoint_in_use_is_a_clear_error(tiny_llama_path) -> None:
    _in_subprocess("busy_port_scenario", str(tiny_llama_path))


def busy_port_scenario(tiny_llama_path: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match="cannot bind"):
            Engine(str(tiny_llama_path), kv_events_config=_config(port, _port()))


def test_dp_replicas_never_share_a_port() -> None:
    from radixrt.core.config import KVEventsConfig

    ports = set()
    for cfg in (KVEventsConfig(), KVEventsConfig(replay_endpoint="tcp://127.0.0.1:5560")):
        ports.clear()
        for rank in range(4):
            pub, replay = cfg.endpoints_for(rank)
            for endpoint in (pub, replay):
                assert endpoint is not None
                port = int(endpoint.rsplit(":", 1)[1])
                assert port not in ports, (rank, endpoint)
                ports.add(port)
    assert KVEventsConfig().endpoints_for(1) == ("tcp://127.0.0.1:5559", "tcp://127.0.0.1:5560")
    ipc = KVEventsConfig(endpoint="ipc:///tmp/ev", replay_endpoint=None)
    assert ipc.endpoints_for(2) == ("ipc:///tmp/ev.2", None)
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        KVEventsConfig.parse('{"endpoint": "localhost:5557"}')
