"""KV events under tenants (docs/reliability.md, "Smaller items"): a server with tenants
starts only when its events carry hashes alone or go to ipc endpoints in a private folder;
`"token_ids": false` leaves them out of BlockStored; an unread subscriber's queue is small."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from radixrt.cache.kv_events import BlockStored, KVEventBatch, KVEvents
from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.radix_cache import RadixCache
from radixrt.core.config import KVEventsConfig
from radixrt.serve.http.args import parse_args


class Recorder:
    def __init__(self) -> None:
        self.batches: list[KVEventBatch] = []

    def send(self, batch: KVEventBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("token_ids", [True, False])
def test_token_ids_false_sends_hashes_only(token_ids: bool) -> None:
    sender = Recorder()
    alloc = TokenSlotAllocator(64)
    cache, events = RadixCache(alloc), KVEvents(sender, 4, "CPU", token_ids=token_ids)
    cache.observers.add(events)
    key = list(range(100, 108))
    slots = alloc.alloc(len(key))
    alloc.free(slots[: cache.insert(key, slots, "tenant:a")])
    events.publish()
    (stored,) = sender.batches[0].events
    assert isinstance(stored, BlockStored) and len(stored.block_hashes) == 2
    assert stored.token_ids == (key if token_ids else [])
    cache.reset()


def _serve(tmp: Path, events: dict) -> list[str]:
    keys = tmp / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "k", "tenant": "a", "role": "user"}]}))
    return ["--api-key-file", str(keys), "--kv-events-config", json.dumps(events)]


def test_tenants_need_hashes_only_or_a_private_ipc_folder(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        parse_args(_serve(tmp_path, {}))  # token ids on tcp://127.0.0.1: any local user reads
    assert '"token_ids": false' in capsys.readouterr().err
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)
    shared = {"endpoint": f"ipc://{open_dir}/ev", "replay_endpoint": None}
    with pytest.raises(SystemExit):
        parse_args(_serve(tmp_path, shared))
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    private = {"endpoint": f"ipc://{mine}/ev", "replay_endpoint": f"ipc://{mine}/replay"}
    assert parse_args(_serve(tmp_path, private)).cache.kv_events is not None
    hashes = parse_args(_serve(tmp_path, {"token_ids": False})).cache.kv_events
    assert hashes is not None and not hashes.token_ids
    assert parse_args(["--kv-events-config", "{}"]).cache.kv_events is not None  # no tenants


def test_an_unread_subscriber_queues_a_bounded_number_of_batches() -> None:
    assert KVEventsConfig().hwm <= 1000  # was 100,000 batches per subscriber that never reads
