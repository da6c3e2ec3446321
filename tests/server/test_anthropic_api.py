"""Anthropic's Messages API through the official `anthropic` client: prompt caching with
cache_control (writes, reads, the 5m/1h split, pre-warming, pins that outlive a flood, expiry),
streaming, stop sequences, count_tokens and the error shapes; a real server with a small pool
(2048 tokens), TTLs shortened 100-fold (5m: 3 s, 1h: 36 s) and breakpoints under 16 tokens not
pinned. Without a server: test_anthropic_protocol.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from .server_proc import ServerProcess, start_server

JSON = {"content-type": "application/json"}  # a body is refused without it
POOL_TOKENS = 2048
TTL_SCALE = 0.01
MIN_TOKENS = 16
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def text(tag: str, tokens: int) -> str:
    """About `tokens` tokens that share nothing with another tag (~10 tokens a sentence)."""
    return " ".join(f"{tag} line {i} holds item {i}." for i in range(tokens // 10))


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    s = start_server(
        smollm2_path,
        tmp_path_factory.mktemp("anthropic"),
        "--max-total-tokens",
        str(POOL_TOKENS),
        "--cache-ttl-scale",
        str(TTL_SCALE),
        "--cache-min-tokens",
        str(MIN_TOKENS),
    )
    try:
        yield s
        assert s.proc.poll() is None, "the server died during the tests"
    finally:
        s.stop()


@pytest.fixture
def client(server: ServerProcess):
    """A client per test; afterwards the pool is whole with the pins, then they are dropped (a
    flush) and it is whole without them."""
    yield anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    server.wait_idle_and_whole()  # counts pinned_tokens
    assert server.post("/flush_cache").status_code == 200
    assert server.wait_idle_and_whole()["pinned_tokens"] == 0


def info(server: ServerProcess) -> dict:
    return server.get("/get_server_info").json()


def create(client: anthropic.Anthropic, system: Any = None, user: str = "Say hi.", **kw: Any):
    kw.setdefault("max_tokens", 4)
    if system is not None:
        kw["system"] = system
    return client.messages.create(
        model="default",
        messages=kw.pop("messages", [{"role": "user", "content": user}]),
        extra_body={"temperature": 0},
        **kw,
    )


def marked(tag: str, tokens: int, control: dict = EPHEMERAL) -> list[dict]:
    return [{"type": "text", "text": text(tag, tokens), "cache_control": control}]


def test_first_call_writes_and_the_second_reads(client) -> None:
    system = marked("write-read", 80)
    first = create(client, system)
    u = first.usage
    assert u.cache_creation_input_tokens > 60 and u.cache_read_input_tokens < 10
    assert u.cache_creation.ephemeral_5m_input_tokens == u.cache_creation_input_tokens
    end = u.cache_read_input_tokens + u.cache_creation_input_tokens  # the breakpoint's offset
    assert first.type == "message" and first.role == "assistant" and first.id.startswith("msg_")
    assert first.content[0].type == "text" and first.stop_reason in ("end_turn", "max_tokens")
    second = create(client, system, user="Now say bye.")  # the same blocks up to the breakpoint
    assert second.usage.cache_read_input_tokens >= end
    assert second.usage.cache_creation_input_tokens == 0
    total = second.usage.input_tokens + second.usage.cache_read_input_tokens
    counted = client.messages.count_tokens(
        model="default", system=system, messages=[{"role": "user", "content": "Now say bye."}]
    )
    assert counted.input_tokens == total


def test_the_5m_and_1h_split(client, server) -> None:
    tool = {"name": "lookup", "description": text("tool", 40), "input_schema": {"type": "object"}}
    tools = [{**tool, "cache_control": HOUR}]
    out = create(client, marked("split", 40), tools=tools)
    c = out.usage.cache_creation
    assert c.ephemeral_1h_input_tokens > 30 and c.ephemeral_5m_input_tokens > 20
    split = c.ephemeral_1h_input_tokens + c.ephemeral_5m_input_tokens
    assert out.usage.cache_creation_input_tokens == split
    assert info(server)["pinned_tokens"] >= out.usage.cache_creation_input_tokens


def test_breakpoint_errors_have_anthropics_wording(client, server) -> None:
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as e:
        create(client, messages=[{"role": "user", "content": blocks}])
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in str(e.value)
    assert e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError, match="ttl='1h'"):
        create(client, marked("order", 20) + marked("order-2", 20, HOUR))
    r = server.post(
        "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert r.status_code == 400 and r.json()["error"]["message"] == "max_tokens: Field required"
    r = server.post("/v1/messages", content=b"{not json", headers=JSON)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    doc = server.get("/openapi.json").json()["paths"]
    assert "requestBody" in doc["/v1/messages"]["post"]
    assert "requestBody" in doc["/v1/messages/count_tokens"]["post"]
    r = server.post("/v1/messages/unknown", json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        create(client, thinking={"type": "enabled", "budget_tokens": 1024})
    # Adaptive thinking lets the model think as it will: this one does not think at all.
    adaptive = create(client, thinking={"type": "adaptive"}, output_config={"effort": "low"})
    assert [b.type for b in adaptive.content] == ["text"]
    with pytest.raises(anthropic.BadRequestError, match="output_config.effort: 'huge'"):
        create(client, thinking={"type": "adaptive"}, output_config={"effort": "huge"})
    with pytest.raises(anthropic.BadRequestError, match="thinking.display"):
        create(client, thinking={"type": "adaptive", "display": "hidden"})


def test_stream_equals_the_message(client, server) -> None:
    kw = {"system": marked("stream", 30), "user": "Count to five.", "max_tokens": 8}
    whole = create(client, **kw)
    with client.messages.stream(
        model="default",
        max_tokens=8,
        system=kw["system"],
        messages=[{"role": "user", "content": "Count to five."}],
        extra_body={"temperature": 0},
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert streamed.stop_reason == whole.stop_reason
    assert streamed.usage.output_tokens == whole.usage.output_tokens
    assert streamed.usage.cache_read_input_tokens >= whole.usage.cache_creation_input_tokens
    hello = [{"role": "user", "content": "Hello"}]
    request = {"model": "m", "max_tokens": 3, "stream": True, "messages": hello}
    with httpx.stream("POST", server.url + "/v1/messages", json=request, timeout=60) as r:
        names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) <= {"content_block_delta"}


def test_stop_sequences(client) -> None:
    free = create(client, user="List the days of the week.", max_tokens=8).content[0].text
    words = [w for w in free.split() if len(w) > 2]
    stop = words[min(1, len(words) - 1)]
    out = create(client, user="List the days of the week.", max_tokens=8, stop_sequences=[stop])
    assert (out.stop_reason, out.stop_sequence) == ("stop_sequence", stop)
    assert out.content[0].text == free[: free.index(stop)]


def test_max_tokens_0_prewarms(client) -> None:
    system = marked("prewarm", 60)
    warm = create(client, system, max_tokens=0)
    assert warm.content == [] and warm.stop_reason == "max_tokens"
    assert warm.usage.output_tokens == 0 and warm.usage.cache_creation_input_tokens > 40
    end = warm.usage.cache_creation_input_tokens + warm.usage.cache_read_input_tokens
    assert create(client, system, user="Hello?").usage.cache_read_input_tokens >= end


def test_short_breakpoints_are_not_pinned(client, server) -> None:
    out = create(client, user="Hi", cache_control=EPHEMERAL)  # automatic, on a short prompt
    assert out.usage.cache_creation_input_tokens > 0  # the default system prompt makes it long
    short = create(client, [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}])
    assert short.usage.cache_creation_input_tokens == 0  # under --cache-min-tokens
    assert info(server)["num_pins"] == 1


def test_a_pinned_prefix_outlives_a_flood(client, server) -> None:
    pinned = marked("keep", 150, HOUR)  # 36 s, and each hit pushes it back
    free = [{"type": "text", "text": text("lose", 150)}]
    end = create(client, pinned, max_tokens=1).usage.cache_creation_input_tokens
    first_free = create(client, free, max_tokens=1).usage
    assert end > 120 and first_free.cache_creation_input_tokens == 0
    for i in range(4):  # ~2000 new tokens where ~1750 are free or evictable
        create(client, user=text(f"flood{i}", 500), max_tokens=1)
    assert info(server)["pinned_tokens"] >= end
    kept = create(client, pinned, user="Another question.", max_tokens=1).usage
    assert kept.cache_read_input_tokens >= end
    lost = create(client, free, user="Another question.", max_tokens=1).usage
    assert lost.cache_read_input_tokens < 20  # only the template's opening is still cached


def test_pins_expire(client, server) -> None:
    create(client, marked("expire", 40), max_tokens=1)  # 5m: 3 s here
    assert info(server)["pinned_tokens"] > 30
    deadline = time.monotonic() + 10
    while info(server)["pinned_tokens"] > 0:
        assert time.monotonic() < deadline, "the pin did not expire"
        time.sleep(0.25)
    assert info(server)["num_pins"] == 0
