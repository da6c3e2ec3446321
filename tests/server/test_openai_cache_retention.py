"""OpenAI `prompt_cache_retention` and `prompt_cache_key` through the official client, and the
pin and handle figures of /metrics and /get_server_info, on a real server with a small pool
(2048 tokens) and TTLs shortened 200-fold (`in_memory`: 3 s, `24h`: 432 s, a 3600 s handle:
18 s)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import openai
import pytest

from .server_proc import ServerProcess, start_server

POOL_TOKENS = 2048
TTL_SCALE = 0.005
IN_MEMORY_TTL_S = 600 * TTL_SCALE


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    s = start_server(
        smollm2_path,
        tmp_path_factory.mktemp("retention"),
        "--max-total-tokens",
        str(POOL_TOKENS),
        "--cache-ttl-scale",
        str(TTL_SCALE),
        "--enable-metrics",
    )
    try:
        yield s
        assert s.proc.poll() is None, "the server died during the tests"
    finally:
        s.stop()


@pytest.fixture
def client(server: ServerProcess):
    """A client per test; afterwards the pins are dropped (a flush) and the pool is whole."""
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    deadline = time.monotonic() + 30
    while server.post("/flush_cache").status_code != 200:  # 409 while requests run
        assert time.monotonic() < deadline, "the server stayed busy"
        time.sleep(0.1)
    server.wait_idle_and_whole()


def info(server: ServerProcess) -> dict:
    return server.get("/get_server_info").json()


def text(tag: str, tokens: int) -> str:
    """About `tokens` tokens that share nothing with another tag (~7 tokens a sentence)."""
    return " ".join(f"{tag} line {i} holds item {i}." for i in range(tokens // 7))


def complete(client: openai.OpenAI, prompt: str, **extra: object):
    return client.completions.create(
        model="default", prompt=prompt, max_tokens=1, temperature=0, extra_body=extra or None
    )


def test_in_memory_pins_the_prompt_and_a_repeat_reads_it(client, server) -> None:
    messages = [{"role": "user", "content": "Retention: name three primary colours."}]
    first = client.chat.completions.create(
        model="default",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=2,
        temperature=0,
        prompt_cache_retention="in_memory",
        prompt_cache_key="conversation-1",  # the session key: accepted, routes under --dp
    )
    now = info(server)
    assert now["num_pins"] == 1
    assert now["pinned_tokens"] == first.usage.prompt_tokens  # the whole prompt (page size 1)
    again = client.chat.completions.create(
        model="default",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=2,
        temperature=0,
    )
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 1  # all but the token that makes the logits


def test_both_spellings_and_24h_pin_through_completions(client, server) -> None:
    for i, retention in enumerate(("in-memory", "24h")):
        complete(client, text(f"Spelling{i}", 60), prompt_cache_retention=retention)
    assert info(server)["num_pins"] == 2


def test_a_pin_outlives_a_flood_that_evicts_an_unpinned_prompt(client, server) -> None:
    pinned, unpinned = text("Pinned", 120), text("Unpinned", 120)
    first = complete(client, pinned, prompt_cache_retention="24h")
    complete(client, unpinned)
    held = info(server)["pinned_tokens"]
    assert held == first.usage.prompt_tokens
    flood = 0
    for i in range(12):  # unique prompts, twice the pool in all
        flood += complete(client, text(f"Flood{i}", 340)).usage.prompt_tokens
    assert flood > 2 * POOL_TOKENS
    after = info(server)
    assert after["num_pins"] == 1 and after["pinned_tokens"] == held
    assert complete(client, pinned).usage.prompt_tokens_details.cached_tokens >= held - 1
    assert complete(client, unpinned).usage.prompt_tokens_details.cached_tokens == 0


def test_an_in_memory_pin_expires_after_its_scaled_ttl(client, server) -> None:
    complete(client, text("Expiring", 60), prompt_cache_retention="in_memory")
    start = time.monotonic()
    assert info(server)["num_pins"] == 1
    while info(server)["num_pins"] == 1:
        assert time.monotonic() - start < 10 * IN_MEMORY_TTL_S, "the pin never expired"
        time.sleep(0.2)
    assert time.monotonic() - start >= IN_MEMORY_TTL_S - 1.0  # not before its time
    assert info(server)["pinned_tokens"] == 0


def test_a_bad_retention_is_a_400_naming_the_allowed_values(client, server) -> None:
    with pytest.raises(openai.BadRequestError) as chat_error:
        client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=1,
            prompt_cache_retention="1h",  # type: ignore[arg-type]
        )
    with pytest.raises(openai.BadRequestError) as completion_error:
        complete(client, "hi", prompt_cache_retention="forever")
    for error, value in ((chat_error, "1h"), (completion_error, "forever")):
        message = str(error.value)
        assert "prompt_cache_retention" in message and value in message
        assert "in_memory" in message and "24h" in message
    assert info(server)["num_pins"] == 0


def test_metrics_show_pins_and_handles_after_a_cache_create(client, server) -> None:
    r = server.post("/v1/caches", json={"text": text("Handle", 80), "ttl": 3600})
    assert r.status_code == 200, r.text
    handle = r.json()
    figures = metrics(server)
    assert figures["radixrt_pins"] == 1 and figures["radixrt_cache_handles"] == 1
    assert figures["radixrt_pinned_tokens"] == handle["tokens"]
    assert figures["radixrt_cache_token_hours_total"] >= 0
    now = info(server)
    assert now["num_cache_handles"] == 1 and now["cache_token_hours"] >= 0
    time.sleep(0.5)
    assert httpx.delete(server.url + f"/v1/caches/{handle['id']}").status_code == 200
    gone = metrics(server)
    assert gone["radixrt_pins"] == 0 and gone["radixrt_cache_handles"] == 0
    assert gone["radixrt_pinned_tokens"] == 0
    assert gone["radixrt_cache_token_hours_total"] > 0  # storage so far stays counted


def metrics(server: ServerProcess) -> dict[str, float]:
    """The unlabelled samples of a /metrics scrape."""
    r = server.get("/metrics")
    assert r.status_code == 200, r.text
    found = re.findall(r"^(radixrt_[a-z_]+) (\S+)$", r.text, re.MULTILINE)
    return {name: float(value) for name, value in found}
