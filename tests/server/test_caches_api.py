"""The native cache handles (/v1/caches) on a real server (the default model, a small pool):
create, list, get, generate with cache_id, PATCH, DELETE, expiry, a flood that evicts what is
not pinned, a flush that drops the pin (the next use makes it again), the bounds, bad input,
and tenants that cannot see each other's handles; the pool whole after each test."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .server_proc import start_server

DOC = "Radixrt keeps this manual in its cache. " + " ".join(
    f"Section {i}: the value of item {i} is {i * 7}." for i in range(12)
)
GREEDY = {"max_new_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("caches")
    keys = [
        {"key": "key-a", "tenant": "a", "role": "admin"},
        {"key": "key-b", "tenant": "b", "role": "user"},
    ]
    (tmp / "keys.json").write_text(json.dumps({"keys": keys}))
    srv = start_server(
        smollm2_path,
        tmp,
        "--max-total-tokens",
        "1024",
        "--max-pinned-fraction",
        "0.5",
        "--api-key-file",
        str(tmp / "keys.json"),
    )
    srv.headers = {"Authorization": "Bearer key-a"}
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def whole_after(server: Any) -> Any:
    yield
    for h in server.get("/v1/caches").json()["data"]:
        server.delete(f"/v1/caches/{h['id']}")
    info = server.wait_idle_and_whole()
    assert info["pinned_tokens"] == 0 and info["num_pins"] == 0, info


def _info(server: Any) -> dict[str, Any]:
    return server.get("/get_server_info").json()


def _gen(server: Any, text: str, **kw: Any) -> dict[str, Any]:
    r = server.post("/generate", json={"text": text, "sampling_params": GREEDY, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_create_use_patch_delete(server: Any) -> None:
    r = server.post("/v1/caches", json={"text": DOC, "ttl": 600, "name": "manual"})
    assert r.status_code == 200, r.text
    handle = r.json()
    assert handle["tokens"] > 100 and handle["name"] == "manual"
    assert 590 < handle["expire_time"] - time.time() <= 600
    assert _info(server)["pinned_tokens"] == handle["tokens"]
    assert [h["id"] for h in server.get("/v1/caches").json()["data"]] == [handle["id"]]
    assert server.get(f"/v1/caches/{handle['id']}").json()["tokens"] == handle["tokens"]

    out = _gen(server, " What is item 3?", cache_id=handle["id"])
    meta = out["meta_info"]
    assert meta["cached_tokens"] == handle["tokens"]  # every token of the handle was read
    assert meta["prompt_tokens"] > handle["tokens"]
    plain = _gen(server, DOC + " What is item 3?")  # the same prompt spelled out
    assert plain["output_ids"] == out["output_ids"]

    r = server.patch(f"/v1/caches/{handle['id']}", json={"ttl": 1.5})
    assert r.status_code == 200 and r.json()["expire_time"] - time.time() < 2
    time.sleep(2.0)
    assert server.get(f"/v1/caches/{handle['id']}").status_code == 404
    assert _info(server)["pinned_tokens"] == 0  # the scheduler dropped the pin on time
    r = server.post("/generate", json={"text": "x", "cache_id": handle["id"]})
    assert r.status_code == 404 and "expired" in r.json()["error"]["message"]


def test_a_pin_holds_through_a_flood_that_evicts_the_rest(server: Any) -> None:
    handle = server.post("/v1/caches", json={"text": DOC, "ttl": 600}).json()
    other = "An unpinned note that the flood will evict. " * 6
    _gen(server, other)
    for i in range(12):  # about 3x the pool of unique prompts
        _gen(server, f"Flood prompt {i}: " + " ".join(f"word{i}x{j}" for j in range(60)))
    assert (
        _gen(server, " Item 5?", cache_id=handle["id"])["meta_info"]["cached_tokens"]
        == (handle["tokens"])
    )
    assert _gen(server, other)["meta_info"]["cached_tokens"] < 10


def test_a_flush_drops_the_pin_and_the_next_use_makes_it_again(server: Any) -> None:
    handle = server.post("/v1/caches", json={"text": DOC, "ttl": 600}).json()
    assert server.post("/flush_cache").status_code == 200
    assert _info(server)["num_pins"] == 0
    out = _gen(server, " Item 1?", cache_id=handle["id"])
    assert out["meta_info"]["cached_tokens"] == 0  # computed again...
    assert _info(server)["num_pins"] == 1  # ...and pinned again until the handle expires
    again = _gen(server, " Item 2?", cache_id=handle["id"])["meta_info"]["cached_tokens"]
    assert again >= handle["tokens"]  # the handle, and " Item" from the last prompt


def test_a_generate_running_at_the_delete_does_not_pin_the_handle_again(server: Any) -> None:
    handle = server.post("/v1/caches", json={"text": DOC, "ttl": 600}).json()
    body = {"text": " Item 4?", "cache_id": handle["id"], "stream": True,
            "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}  # fmt: skip
    with httpx.stream("POST", server.url + "/generate", json=body, headers=server.headers,
                      timeout=120) as r:  # fmt: skip
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))  # it is running
        assert server.delete(f"/v1/caches/{handle['id']}").status_code == 200
        assert _info(server)["num_pins"] == 0
        assert [line for line in lines if line.startswith("data:")][-1] == "data: [DONE]"
    info = _info(server)
    assert info["num_pins"] == 0 and info["pinned_tokens"] == 0  # not made again for 600 s


def test_a_pin_past_the_bound_is_refused_with_the_reason(server: Any) -> None:
    big = " ".join(f"Clause {i} binds the parties to term {i}." for i in range(40))
    r = server.post("/v1/caches", json={"text": big})
    assert r.status_code == 409, r.text
    assert "--max-pinned-fraction" in r.json()["error"]["message"]
    assert server.get("/v1/caches").json()["data"] == []


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"text": "a", "ttl": 0}, 400, "ttl must be in"),
        ({"text": "a", "ttl": 1e12}, 400, "ttl must be in"),
        ({"text": "a", "input_ids": [1]}, 400, "exactly one of"),
        ({}, 400, "exactly one of"),
        ({"input_ids": [10**9]}, 400, "outside the vocabulary"),
        ({"text": "a", "nope": 1}, 400, "nope"),
        ({"text": "a", "name": "x" * 10000}, 400, "name"),
    ],
)
def test_bad_create_bodies(server: Any, body: dict, status: int, words: str) -> None:
    r = server.post("/v1/caches", json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


def test_bad_uses(server: Any) -> None:
    assert server.get("/v1/caches/nope").status_code == 404
    assert server.delete("/v1/caches/nope").status_code == 404
    r = server.post("/generate", json={"text": "x", "cache_id": "nope"})
    assert r.status_code == 404
    handle = server.post("/v1/caches", json={"text": "Short prefix.", "ttl": 60}).json()
    r = server.patch(f"/v1/caches/{handle['id']}", json={"ttl": 5, "expire_time": 1.0})
    assert r.status_code == 400
    r = server.patch(f"/v1/caches/{handle['id']}", json={"expire_time": time.time() - 5})
    assert r.status_code == 400
    r = server.post("/generate", json={"text": "x", "cache_id": handle["id"], "cache_salt": "s"})
    assert r.status_code == 400 and "cache_salt" in r.json()["error"]["message"]


def test_tenants_do_not_see_each_others_handles(server: Any) -> None:
    b = {"Authorization": "Bearer key-b"}
    handle = server.post("/v1/caches", json={"text": DOC, "ttl": 600}).json()
    assert server.get("/v1/caches", headers=b).json()["data"] == []
    assert server.get(f"/v1/caches/{handle['id']}", headers=b).status_code == 404
    assert server.delete(f"/v1/caches/{handle['id']}", headers=b).status_code == 404
    r = server.post("/generate", headers=b, json={"text": "x", "cache_id": handle["id"]})
    assert r.status_code == 404
    assert server.get(f"/v1/caches/{handle['id']}").status_code == 200  # a's still


def test_server_info_sizes_the_pool_with_kv_sizes_arithmetic(server: Any) -> None:
    """The same bytes per token `radixrt kv-size` prints (SmolLM2: 2 x 30 layers x 3 KV heads
    x 64 x 4 bytes), and the pool it measured holds that many bytes per slot, to a page."""
    sizing = _info(server)["kv_sizing"]
    assert sizing["bytes_per_token"] == 2 * 30 * 3 * 64 * 4 == sizing["bytes_per_token_per_rank"]
    computed, measured = sizing["pool_bytes_computed"], sizing["pool_bytes_measured"]
    assert computed <= measured <= computed + 2 * sizing["bytes_per_token"], sizing
    # no sliding-window layers: no window pool, and no second way to count
    assert sizing["window_pool_tokens"] == 0 == sizing["num_window_layers"]
    context = server.get("/get_model_info").json()["context_length"]
    assert sizing["requests_of_full_context"] == sizing["pool_tokens"] // context
    assert "one_pool" not in sizing
