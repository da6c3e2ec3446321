"""`--dp 2` with SmolLM2: cache-aware routing keeps each prefix group on one replica, outputs
equal a single replica's, and both replicas' pools are whole afterwards."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from .server_proc import ServerProcess, start_server

PREFIXES = [
    "Paris is the capital of France. It is known for the Eiffel Tower, the Louvre museum, "
    "wide boulevards, cafes and the river Seine that runs through the middle of the city.",
    "Photosynthesis is how green plants turn light into food. Leaves take in carbon dioxide "
    "and water, and with energy from sunlight they make sugar and give off oxygen.",
    "A computer program is a list of instructions. The processor reads each instruction from "
    "memory, carries it out, and moves on to the next one, millions of times each second.",
    "The ocean covers most of the surface of the Earth. Its water is salty, its deepest "
    "trenches are darker than night, and its currents carry heat from the tropics to the poles.",
]
ROUNDS = 3


@pytest.fixture(scope="module")
def dp_server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    server = start_server(smollm2_path, tmp_path_factory.mktemp("dp_server"), "--dp", "2")
    try:
        yield server
        info = server.wait_idle_and_whole()
        for replica in info["replicas"]:
            r = replica
            assert (
                r["free_tokens"] + r["evictable_tokens"] + r["protected_tokens"]
                == r["max_total_tokens"]
            ), r
        assert server.proc.poll() is None, "the server died during the tests"
    finally:
        server.stop()


def _generate(server: ServerProcess, text: str) -> dict:
    r = server.post(
        "/generate", json={"text": text, "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_prefix_groups_stay_on_one_replica(dp_server, api_server) -> None:
    prompts = [[f"{p} Question {i}: say it in one word." for p in PREFIXES] for i in range(ROUNDS)]
    results = []
    with ThreadPoolExecutor(len(PREFIXES)) as pool:
        for round_prompts in prompts:  # rounds in order, the groups of one round at once
            results.append(list(pool.map(lambda t: _generate(dp_server, t), round_prompts)))
    for later in results[1:]:
        for out in later:  # the group's prefix was found in the cache of the replica chosen
            meta = out["meta_info"]
            assert meta["cached_tokens"] >= 0.75 * meta["prompt_tokens"], meta
    info = dp_server.wait_idle_and_whole()
    routed = [r["routed_requests"] for r in info["replicas"]]
    assert sum(routed) == len(PREFIXES) * ROUNDS and min(routed) > 0, routed
    assert info["router_policy"] == "cache_aware"
    prompt, cached = info["prompt_tokens"], info["cached_tokens"]
    one_replica_best = sum(r["meta_info"]["cached_tokens"] for rr in results[1:] for r in rr)
    assert cached >= one_replica_best and cached / prompt > 0.5
    for round_prompts, outs in zip(prompts, results):
        for text, out in zip(round_prompts, outs):
            assert _generate(api_server, text)["output_ids"] == out["output_ids"]


def test_openai_chat_and_session_through_dp(dp_server) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 3,
        "temperature": 0,
        "user": "alice",
    }
    r = httpx.post(
        dp_server.url + "/v1/chat/completions",
        json=body,
        headers={"X-Session-Id": "s1"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3
    bad = dp_server.post("/v1/completions", json={"prompt": "x", "max_tokens": -1})
    assert bad.status_code == 400
