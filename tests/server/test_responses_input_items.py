"""GET /v1/responses/{id}/input_items through the official client (tiny-model server): the
conversation a stored response was given (earlier turns through previous_response_id, then
its own input) as items, newest first by default, paged with limit and after."""

from __future__ import annotations

import openai
import pytest

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]


@pytest.fixture(scope="module")
def client(tiny_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="x", max_retries=0)


def test_input_items_of_a_continued_response(client, tiny_server) -> None:
    first = client.responses.create(
        model="m", instructions="Be brief.", max_output_tokens=4,
        input=[{"role": "user", "content": "Call f."},
               {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": "done"}],
    )  # fmt: skip
    answer = first.output_text
    second = client.responses.create(
        model="m", previous_response_id=first.id, input="And now?", max_output_tokens=4
    )
    items = list(client.responses.input_items.list(second.id, order="asc"))
    kinds = [(i.type, getattr(i, "role", None)) for i in items]
    assert kinds == [("message", "user"), ("function_call", None),
                     ("function_call_output", None), ("message", "assistant"),
                     ("message", "user")]  # fmt: skip
    assert items[0].content[0].text == "Call f." and items[1].call_id == "c1"
    assert items[2].output == "done" and items[3].content[0].text == answer
    assert items[4].content[0].text == "And now?"
    newest = client.responses.input_items.list(second.id)  # desc, the default
    assert [i.id for i in newest.data] == [i.id for i in reversed(items)]
    page = client.responses.input_items.list(second.id, order="asc", limit=2)
    assert page.has_more and [i.id for i in page.data] == [i.id for i in items[:2]]
    rest = client.responses.input_items.list(second.id, order="asc", after=page.data[-1].id)
    assert [i.id for i in rest.data] == [i.id for i in items[2:]] and not rest.has_more
    assert [i.type for i in client.responses.input_items.list(first.id, order="asc")] == [
        "message", "function_call", "function_call_output"]  # fmt: skip


def test_bad_queries_and_unknown_responses(client, tiny_server) -> None:
    r = client.responses.create(model="m", input="Hi", max_output_tokens=2)
    path = f"/v1/responses/{r.id}/input_items"
    for query, fragment in (("?limit=0", "limit: must be in [1, 100]"),
                            ("?order=up", "order: must be 'asc' or 'desc'"),
                            ("?after=nope", "after: no input item")):  # fmt: skip
        got = tiny_server.get(path + query)
        assert got.status_code == 400 and fragment in got.text
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_none")
    unstored = client.responses.create(model="m", input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(unstored.id)
