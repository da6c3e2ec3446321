"""The router's `--kv-events`: its per-worker block indexes follow the workers' KV events
(joining late through replay, emptied by a flush), and it routes a prompt to the worker that
holds its prefix even when that prefix reached the worker without passing the router."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from radixrt.cache.kv_event_schema import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from radixrt.core.config import RouterConfig
from radixrt.serve.placement.block_index import BlockIndex, prompt_blocks
from radixrt.serve.placement.cache_aware import CacheAwarePolicy
from radixrt.serve.placement.policy import RouteRequest, WorkerLoad
from tests.router.test_router_server import RouterProcess
from tests.server.server_proc import ServerProcess, free_port, start_server

BLOCK = 16
PREFIXES = [  # 55-65 tokens each: three whole blocks
    2 * "You are a careful travel agent. List three train routes between two capitals, "
    "give each one a price in euros and a duration in hours, and nothing else. ",
    2 * "Translate every sentence the user gives into formal French, keep the punctuation, "
    "and answer with the translation alone on a single line without quotes. ",
]


def _stored(hashes: tuple, ids: list[int]) -> BlockStored:
    return BlockStored(list(hashes), None, ids, BLOCK, None, "CPU")


def test_block_index_and_cache_aware_pick_the_holder() -> None:
    ids = list(range(100, 180))  # 5 blocks
    key = prompt_blocks(ids, "tenant\x1f", BLOCK)
    assert len(key) == 5 and key != prompt_blocks(ids, None, BLOCK)  # namespaces differ
    holder, other = BlockIndex(), BlockIndex()
    holder.apply("0", KVEventBatch(0.0, [_stored(key[:4], ids[:64])]))
    assert holder.match(key) == 4 and other.match(key) == 0
    policy = CacheAwarePolicy(RouterConfig(), make_index={"a": other, "b": holder}.__getitem__)
    workers = [WorkerLoad("a", 0), WorkerLoad("b", 3)]
    assert workers[policy.select(RouteRequest(key), workers)].worker_id == "b"
    # The chosen worker's index now guesses the fifth block until events confirm it.
    assert holder.match(key) == 5 and holder.stats()["guesses"] == 1
    holder.apply("0", KVEventBatch(0.0, [BlockRemoved([key[1]], "CPU")]))
    assert holder.match(key) == 1  # a hole stops the prefix
    holder.apply("1", KVEventBatch(0.0, [_stored(key[:2], ids[:32])]))
    assert holder.match(key) == 5  # another replica of the same worker fills the hole
    holder.apply("0", KVEventBatch(0.0, [AllBlocksCleared()]))
    holder.drop_source("1")
    assert holder.match(key) == 0 and holder.stats()["blocks"] == 0
    expiring = BlockIndex(guess_ttl_s=0.0)
    expiring.insert(key)
    time.sleep(0.01)
    assert expiring.match(key) == 0


def _events_config(port: int) -> str:
    pub, replay = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{free_port()}"
    return json.dumps({"endpoint": pub, "replay_endpoint": replay, "block_size": BLOCK})


def _generate(url: str, text: str) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
    r = httpx.post(url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _blocks(router: RouterProcess) -> list[int]:
    feed = router.info()["kv_events"]
    return [feed[url]["blocks"] for url in sorted(feed)]


def _wait(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _routed(router: RouterProcess) -> dict[str, int]:
    return {w["url"]: w["routed_requests"] for w in router.info()["workers"]}


@pytest.fixture(scope="module")
def workers(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("router_kv_events")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started: list[ServerProcess] = []
    try:
        for i in range(2):
            (tmp / f"w{i}").mkdir()
            port = free_port()
            flags = ("--max-total-tokens", "4096", "--kv-events-config", _events_config(port))
            started.append(start_server(tiny_llama_path, tmp / f"w{i}", *flags, env=env))
        yield tmp, started
        for w in started:
            w.wait_idle_and_whole()
    finally:
        for w in started:
            w.stop()


def test_routes_by_the_blocks_the_workers_report(workers, tiny_llama_path: Path) -> None:
    tmp, (w0, w1) = workers
    _generate(w0.url, PREFIXES[0] + "First question?")  # before the router starts: replayed
    router = RouterProcess([w0.url, w1.url], tmp / "router.log", "--kv-events",
                           "--tokenizer-path", str(tiny_llama_path))  # fmt: skip
    try:
        urls = sorted([w0.url, w1.url])
        i0 = urls.index(w0.url)
        _wait(lambda: _blocks(router)[i0] >= 3, "the router never replayed worker 0's blocks")
        # Worker 1 gets its prefix straight from a client, while the router follows it live.
        _generate(w1.url, PREFIXES[1] + "First sentence.")
        _wait(lambda: _blocks(router)[1 - i0] >= 3, "the router never saw worker 1's blocks")
        for turn in range(2):
            for target, prefix in ((w0, PREFIXES[0]), (w1, PREFIXES[1])):
                before = _routed(router)
                out = _generate(router.url, prefix + f"Follow-up number {turn}?")
                after = _routed(router)
                assert after[target.url] == before[target.url] + 1, (prefix, before, after)
                assert out["meta_info"]["cached_tokens"] >= 2 * BLOCK
        # A chat prefix set up on worker 0 directly is found through the chat template too.
        chat = [{"role": "system", "content": PREFIXES[1]}, {"role": "user", "content": "Hi"}]
        r = httpx.post(w0.url + "/v1/chat/completions", timeout=120,
                       json={"model": "m", "messages": chat, "max_tokens": 2})  # fmt: skip
        assert r.status_code == 200, r.text
        time.sleep(0.5)
        before = _routed(router)
        chat[-1]["content"] = "Hello there"
        r = httpx.post(router.url + "/v1/chat/completions", timeout=120,
                       json={"model": "m", "messages": chat, "max_tokens": 2})  # fmt: skip
        assert r.status_code == 200, r.text
        assert _routed(router)[w0.url] == before[w0.url] + 1
        # A flush on a worker empties its index in the router.
        w0.wait_idle_and_whole()
        assert w0.post("/flush_cache").status_code == 200
        _wait(lambda: _blocks(router)[i0] == 0, "the flush never reached the router")
        info = router.info()["kv_events"]
        assert all(v["status"] == "following" and v["block_size"] == BLOCK for v in info.values())
        assert router.proc.poll() is None, router.log_path.read_text()
    finally:
        router.stop()


def test_kv_events_needs_cache_aware(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "radixrt.serve.router", "--worker-urls", f"http://127.0.0.1:{free_port()}",
         "--kv-events", "--router-policy", "round_robin"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "cache_aware" in r.stderr
