"""OpenAI's Responses API through the official `openai` client on a real server with the
default model and three tenants (--api-key-file): previous_response_id chains served from the
radix tree, streamed events equal to the whole answer, retrieve and delete, ids scoped to their
tenant, the per-tenant bound (3 here) evicting the oldest with its pin, json_schema output,
prewarm, and 400s naming the field. After each test: the pins flushed, the pool whole."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from radixrt.serve.web.keys import hash_key

from .server_proc import ServerProcess, start_server

KEYS = {"a": "key-of-a", "b": "key-of-b", "c": "key-of-c", "ops": "key-of-ops"}
MAX_STORED = 3
GREEDY: dict[str, Any] = {"model": "default", "temperature": 0}


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("responses")
    entries = [{"key": hash_key(KEYS[t]), "tenant": t} for t in ("a", "b", "c")]
    entries.append({"key": hash_key(KEYS["ops"]), "tenant": "ops", "role": "admin"})
    (tmp / "keys.json").write_text(json.dumps({"keys": entries}))
    s = start_server(
        smollm2_path,
        tmp,
        "--api-key-file",
        str(tmp / "keys.json"),
        "--max-stored-responses",
        str(MAX_STORED),
    )
    s.headers = {"Authorization": f"Bearer {KEYS['ops']}"}
    try:
        yield s
        assert s.proc.poll() is None, "the server died during the tests"
    finally:
        s.stop()


def client_of(server: ServerProcess, tenant: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEYS[tenant], max_retries=0)


@pytest.fixture
def clients(server: ServerProcess):
    """Each tenant's client; afterwards every pin is flushed and the pool must be whole."""
    yield {t: client_of(server, t) for t in ("a", "b", "c")}
    deadline = time.monotonic() + 30
    while server.post("/flush_cache").status_code != 200:  # 409 while requests run
        assert time.monotonic() < deadline, "the server stayed busy"
        time.sleep(0.1)
    server.wait_idle_and_whole()


def num_pins(server: ServerProcess) -> int:
    return server.get("/get_server_info").json()["num_pins"]


def test_a_five_turn_chain_reads_each_earlier_turn_from_the_cache(clients, server) -> None:
    a = clients["a"]
    instructions = "Answer in one short sentence."
    turn = a.responses.create(
        input="Name a colour.", instructions=instructions, max_output_tokens=5, **GREEDY
    )
    assert turn.id.startswith("resp_") and turn.object == "response" and turn.store
    assert turn.output[0].type == "message" and turn.output[0].id.startswith("msg_")
    turns = [turn]
    for k in range(2, 6):
        prev = turns[-1]
        turn = a.responses.create(
            input=f"Name another one, number {k}.",
            instructions=instructions,
            previous_response_id=prev.id,
            max_output_tokens=5,
            **GREEDY,
        )
        usage, before = turn.usage, prev.usage
        assert turn.previous_response_id == prev.id
        assert usage.input_tokens > before.total_tokens
        # The earlier prompt and all but the last output token (never computed) are read.
        assert usage.input_tokens_details.cached_tokens >= before.total_tokens - 1
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens
        turns.append(turn)
    assert a.responses.retrieve(turn.id).output_text == turn.output_text
    # The bound: only the last MAX_STORED are kept, each with its pin.
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(turns[0].id)
    wait_for_pins(server, MAX_STORED)


def test_stream_events_come_in_order_and_equal_the_whole_answer(clients) -> None:
    a = clients["a"]
    args = {"input": "Write a haiku about caches.", "max_output_tokens": 8, **GREEDY}
    whole = a.responses.create(store=False, **args)
    events = list(a.responses.create(stream=True, store=False, **args))
    kinds = [e.type for e in events]
    head = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    tail = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete" if whole.status == "incomplete" else "response.completed",
    ]
    assert kinds[:4] == head and kinds[-4:] == tail
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-4].text
    final = events[-1].response
    assert final.id == events[0].response.id and final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_the_stream_helper_and_a_json_schema_answer(clients) -> None:
    schema = {
        "type": "object",
        "properties": {
            "colour": {"type": "string", "enum": ["red", "green", "blue"]},
            "count": {"type": "integer", "minimum": 1, "maximum": 9},
        },
        "required": ["colour", "count"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}
    args = {
        "input": "Pick a colour and a count.",
        "text": {"format": fmt},
        "max_output_tokens": 40,
        **GREEDY,
    }
    whole = clients["a"].responses.create(**args)
    assert whole.status == "completed" and whole.completed_at is not None
    jsonschema.validate(json.loads(whole.output_text), schema)
    with clients["a"].responses.stream(**args) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == whole.output_text and final.text.format.type == "json_schema"


def test_retrieve_and_delete(clients, server) -> None:
    a = clients["a"]
    made = a.responses.create(
        input="Say hi.", max_output_tokens=3, metadata={"k": "v"}, user="u-1", **GREEDY
    )
    got = a.responses.retrieve(made.id)
    assert got.model_dump() == made.model_dump() and got.metadata == {"k": "v"}
    pins = num_pins(server)
    r = httpx.delete(server.url + f"/v1/responses/{made.id}", headers=auth("a"))
    assert r.json() == {"id": made.id, "object": "response", "deleted": True}
    assert num_pins(server) == pins - 1  # its pin went with it
    for call in (a.responses.retrieve, a.responses.delete):
        with pytest.raises(openai.NotFoundError):
            call(made.id)
    unstored = a.responses.create(input="Say hi.", max_output_tokens=1, store=False, **GREEDY)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(unstored.id)
    assert num_pins(server) == pins - 1


def test_unknown_and_other_tenants_ids_are_404(clients) -> None:
    a, b = clients["a"], clients["b"]
    mine = a.responses.create(input="Say hi.", max_output_tokens=2, **GREEDY)
    for call, rid in (
        (b.responses.retrieve, mine.id),
        (b.responses.delete, mine.id),
        (a.responses.retrieve, "resp_unknown"),
    ):
        with pytest.raises(openai.NotFoundError):
            call(rid)
    for who, rid in ((b, mine.id), (a, "resp_unknown")):
        with pytest.raises(openai.NotFoundError) as e:
            who.responses.create(input="More.", previous_response_id=rid, max_output_tokens=2)
        assert e.value.body["code"] == "previous_response_not_found"
        assert e.value.body["param"] == "previous_response_id" and rid in e.value.body["message"]
    assert a.responses.retrieve(mine.id).id == mine.id  # b's tries changed nothing


def test_the_per_tenant_bound_evicts_the_oldest(clients, server) -> None:
    c, a = clients["c"], clients["a"]
    kept_by_a = a.responses.create(input="Say hi.", max_output_tokens=1, **GREEDY)
    made = [
        c.responses.create(input=f"Count to {i}.", max_output_tokens=1, **GREEDY)
        for i in range(MAX_STORED + 1)
    ]
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(made[0].id)
    assert [c.responses.retrieve(r.id).id for r in made[1:]] == [r.id for r in made[1:]]
    assert a.responses.retrieve(kept_by_a.id).id == kept_by_a.id  # another tenant's bound
    wait_for_pins(server, MAX_STORED + 1)  # c's newest three and a's one


def test_prewarm_computes_and_pins_the_prompt_without_output(clients, server) -> None:
    a = clients["a"]
    document = " ".join(f"Rule {i}: keep line {i}." for i in range(40))
    warm = a.responses.create(
        input=document,
        store=False,
        max_output_tokens=16,
        prompt_cache_options={"prewarm": True, "ttl": "12h"},
        **GREEDY,
    )
    assert warm.status == "completed" and warm.output == [] and warm.usage.output_tokens == 0
    details = warm.usage.input_tokens_details
    assert details.cache_write_tokens == warm.usage.input_tokens
    assert details.cache_write_tokens_details.ttl_12h_tokens == warm.usage.input_tokens
    assert num_pins(server) == 1
    again = a.responses.create(input=document, store=False, max_output_tokens=1, **GREEDY)
    assert again.usage.input_tokens_details.cached_tokens >= warm.usage.input_tokens - 1
    streamed = a.responses.create(input=document, store=False, max_output_tokens=0, stream=True)
    assert [e.type for e in streamed] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"background": True}, "background"),
        ({"reasoning": {"effort": "low"}}, "reasoning.effort: a thinking budget needs"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {}, "defer_loading": True}]},
            "defer_loading",
        ),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
    ],
)
def test_unsupported_fields_are_400_naming_the_field(clients, extra, named) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        clients["a"].responses.create(input="hi", max_output_tokens=1, **GREEDY, **extra)
    assert named in e.value.body["message"] and e.value.body["type"] == "invalid_request_error"


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def wait_for_pins(server: ServerProcess, expected: int) -> None:
    """Evicted responses' pins are dropped right after the answer; wait for it."""
    deadline = time.monotonic() + 10
    while num_pins(server) != expected:
        assert time.monotonic() < deadline, f"{num_pins(server)} pins, expected {expected}"
        time.sleep(0.05)
