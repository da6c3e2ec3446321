"""The batch APIs over the stand-in scheduler: OpenAI's /v1/files and /v1/batches run each
line through its route as the batch's creator (admitted against the tenant's share, at most
--batch-in-flight at once), write output and error files in input order, fail a malformed
input file with line errors, cancel by aborting what is in flight, and show one tenant
nothing of another's."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from radixrt.core.config import ServerConfig
from radixrt.serve.http.api.batches.jobs import BatchJob, BatchLine
from radixrt.serve.http.api.batches.routes import add_routes as add_batch_routes
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.openai.routes import add_routes as add_openai_routes
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.web.keys import KeyRing, KeyStore

from .fake_scheduler import FakeScheduler, make_app

A, B = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}


def _tenancy(tmp: Path, **limits: Any) -> Tenancy:
    path = tmp / "keys.json"
    keys = [{"key": "key-a", "tenant": "a", "role": "user"},
            {"key": "key-b", "tenant": "b", "role": "user"}]  # fmt: skip
    path.write_text(json.dumps({"keys": keys}))
    return Tenancy(KeyStore(KeyRing.from_file(path)), **limits)


def _run(tmp: Path, test: Any, limits: dict[str, Any] | None = None, **config: Any) -> None:
    async def go() -> None:
        tenancy = _tenancy(tmp, **(limits or {}))
        app, ctx, scheduler = make_app(tenancy, ServerConfig(**config))
        add_openai_routes(app, ctx)
        add_batch_routes(app, ctx)
        tenancy.install(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await test(client, ctx, scheduler)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not ctx.tm.states and not ctx.tm.groups and not scheduler.running
        await ctx.tm.close()

    asyncio.run(go())


def _line(custom_id: str, body: dict[str, Any], url: str = "/v1/completions") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


async def _upload(client: httpx.AsyncClient, lines: list[Any], auth: Any = A) -> str:
    data = b"\n".join(json.dumps(x).encode() if not isinstance(x, bytes) else x for x in lines)
    r = await client.post("/v1/files", files={"file": ("in.jsonl", data)},
                          data={"purpose": "batch"}, headers=auth)  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["bytes"] == len(data) and r.json()["purpose"] == "batch"
    return r.json()["id"]


async def _create(client: httpx.AsyncClient, file_id: str, auth: Any = A) -> dict[str, Any]:
    r = await client.post("/v1/batches", headers=auth, json={
        "input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h",
        "metadata": {"job": "nightly"}})  # fmt: skip
    assert r.status_code == 200, r.text
    return r.json()


async def _ended(client: httpx.AsyncClient, batch_id: str) -> dict[str, Any]:
    for _ in range(2000):
        r = await client.get(f"/v1/batches/{batch_id}", headers=A)
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("completed", "failed", "cancelled", "expired"):
            return r.json()
        await asyncio.sleep(0.005)
    raise AssertionError(f"batch {batch_id} did not end")


async def _jsonl(client: httpx.AsyncClient, file_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/files/{file_id}/content", headers=A)
    assert r.status_code == 200, r.text
    return [json.loads(x) for x in r.text.splitlines()]


def test_each_line_runs_through_its_route_as_the_creator(tmp_path) -> None:
    prompts = [f"prompt number {i}" for i in range(12)]

    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        lines = [_line(f"r{i}", {"prompt": p, "max_tokens": 4}) for i, p in enumerate(prompts)]
        lines.insert(5, _line("bad", {"prompt": "x", "max_tokens": -1}))
        batch = await _create(client, await _upload(client, lines))
        assert batch["status"] == "in_progress" and batch["request_counts"]["total"] == 13
        done = await _ended(client, batch["id"])
        assert done["status"] == "completed" and done["metadata"] == {"job": "nightly"}
        assert done["request_counts"] == {"total": 13, "completed": 12, "failed": 1}
        assert done["completed_at"] is not None and done["errors"] is None
        out = await _jsonl(client, done["output_file_id"])
        assert [x["custom_id"] for x in out] == [f"r{i}" for i in range(12)]  # input order
        for i, x in enumerate(out):
            assert x["error"] is None and x["response"]["status_code"] == 200
            assert x["response"]["body"]["choices"][0]["text"] == prompts[i][:4]
        (err,) = await _jsonl(client, done["error_file_id"])
        assert err["custom_id"] == "bad" and err["response"]["status_code"] == 400
        assert "max_new_tokens" in err["response"]["body"]["error"]["message"]
        usage = done["usage"]
        assert usage["input_tokens"] == sum(map(len, prompts)) and usage["output_tokens"] == 48
        assert sched.most_running <= 3  # --batch-in-flight
        assert ctx.tenancy.usage.of("tenant:a").requests == 12  # counted as the creator's
        files = (await client.get("/v1/files", headers=A)).json()["data"]
        assert {f["purpose"] for f in files} == {"batch", "batch_output"} and len(files) == 3
        listed = (await client.get("/v1/batches", headers=A)).json()
        assert listed["data"][0]["id"] == batch["id"] and listed["has_more"] is False

    _run(tmp_path, test, batch_in_flight=3)


def test_lines_over_the_tenants_share_wait_their_turn(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        lines = [_line(f"r{i}", {"prompt": "abc", "max_tokens": 8}) for i in range(6)]
        done = await _ended(client, (await _create(client, await _upload(client, lines)))["id"])
        assert done["request_counts"] == {"total": 6, "completed": 6, "failed": 0}
        assert sched.most_running == 1

    _run(tmp_path, test, {"max_requests_per_tenant": 1}, batch_in_flight=4)


def test_cancel_aborts_the_lines_in_flight_and_starts_no_more(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        lines = [_line(f"r{i}", {"prompt": "abc", "max_tokens": 1000}) for i in range(6)]
        batch = await _create(client, await _upload(client, lines))
        while len(sched.received) < 2:
            await asyncio.sleep(0.001)
        r = await client.post(f"/v1/batches/{batch['id']}/cancel", headers=A)
        assert r.status_code == 200 and r.json()["status"] in ("cancelling", "cancelled")
        done = await _ended(client, batch["id"])
        assert done["status"] == "cancelled" and done["cancelled_at"] is not None
        assert done["request_counts"] == {"total": 6, "completed": 0, "failed": 6}
        assert done["output_file_id"] is None and len(sched.received) == 2
        errors = await _jsonl(client, done["error_file_id"])
        assert [(x["response"], x["error"]["code"]) for x in errors] == [
            (None, "batch_cancelled")] * 6  # fmt: skip
        assert not sched.running

    _run(tmp_path, test, batch_in_flight=2)


def test_another_tenants_batches_and_files_are_not_found(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        file_id = await _upload(client, [_line("r", {"prompt": "abc", "max_tokens": 1})])
        batch = await _create(client, file_id)
        await _ended(client, batch["id"])
        for path in (f"/v1/files/{file_id}", f"/v1/files/{file_id}/content",
                     f"/v1/batches/{batch['id']}"):  # fmt: skip
            assert (await client.get(path, headers=B)).status_code == 404
        assert (
            await client.post(f"/v1/batches/{batch['id']}/cancel", headers=B)
        ).status_code == 404
        assert (await client.delete(f"/v1/files/{file_id}", headers=B)).status_code == 404
        assert (await client.get("/v1/files", headers=B)).json()["data"] == []
        assert (await client.get("/v1/batches", headers=B)).json()["data"] == []
        r = await client.post("/v1/batches", headers=B, json={"input_file_id": file_id,
            "endpoint": "/v1/completions", "completion_window": "24h"})  # fmt: skip
        assert r.status_code == 404
        assert (await client.get("/v1/files", headers={})).status_code == 401
        r = await client.delete(f"/v1/files/{file_id}", headers=A)
        assert r.json() == {"id": file_id, "object": "file", "deleted": True}
        assert (await client.get(f"/v1/files/{file_id}", headers=A)).status_code == 404

    _run(tmp_path, test)


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", "invalid_json_line"),
        (b"[1, 2]", "invalid_request"),
        (_line("r0", {"prompt": "x"}), "duplicate_custom_id"),
        (_line("r1", {"prompt": "x"}, url="/v1/chat/completions"), "invalid_url"),
        ({**_line("r1", {"prompt": "x"}), "method": "GET"}, "invalid_request"),
        (_line("r1", {"prompt": "x", "stream": True}), "invalid_request"),
        (_line("", {"prompt": "x"}), "invalid_request"),
        ({**_line("r1", {"prompt": "x"}), "extra": 1}, "invalid_request"),
    ],
)
def test_a_malformed_input_file_fails_the_batch_naming_the_line(tmp_path, line, code) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        lines = [_line("r0", {"prompt": "abc", "max_tokens": 1}), line]
        batch = await _create(client, await _upload(client, lines))
        assert batch["status"] == "failed" and batch["failed_at"] is not None
        (error,) = batch["errors"]["data"]
        assert error["code"] == code and error["line"] == 2, error
        assert batch["output_file_id"] is None and not sched.received

    _run(tmp_path, test)


def test_bad_uploads_and_create_bodies_are_400s(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        async def create(**body: Any) -> httpx.Response:
            return await client.post("/v1/batches", headers=A, json=body)

        file_id = await _upload(client, [_line("r", {"prompt": "abc", "max_tokens": 1})])
        ok = {"input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h"}
        for body, fragment in [
            ({**ok, "endpoint": "/v1/embeddings"}, "not served in batches"),
            ({**ok, "completion_window": "1h"}, "only '24h'"),
            ({**ok, "input_file_id": "file-none"}, "No such File object"),
            ({**ok, "surprise": 1}, "unknown field"),
            ({**ok, "output_expires_after": {"anchor": "created_at", "seconds": 5}},
             "[3600, 2592000]"),
        ]:  # fmt: skip
            r = await create(**body)
            assert r.status_code in (400, 404) and fragment in r.text, (body, r.text)
        r = await client.post("/v1/files", headers=A, json={"purpose": "batch"})
        assert r.status_code == 400 and "multipart/form-data" in r.text
        r = await client.post("/v1/files", headers=A, files={"file": ("a.jsonl", b"{}")},
                              data={"purpose": "homework"})  # fmt: skip
        assert r.status_code == 400 and "purpose" in r.text
        r = await client.post("/v1/files", headers=A, files={"file": ("a.jsonl", b"x" * 600)},
                              data={"purpose": "user_data"})  # fmt: skip
        assert r.status_code == 200
        r = await create(**{**ok, "input_file_id": r.json()["id"]})
        assert r.status_code == 400 and "not 'batch'" in r.text
        r = await client.post("/v1/files", headers=A, files={"file": ("a.jsonl", b"x" * 600)},
                              data={"purpose": "batch"})  # fmt: skip
        assert r.status_code == 400 and "--max-stored-file-bytes" in r.text
        assert (await client.get("/v1/batches?limit=0", headers=A)).status_code == 400
        assert not sched.received

    _run(tmp_path, test, max_stored_file_bytes=10_000)


def test_lines_not_started_before_the_expiry_expire(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        app = client._transport.app  # type: ignore[attr-defined]
        body = json.dumps({"prompt": "abc", "max_tokens": 1000}).encode()
        lines = [BatchLine(f"r{i}", "/v1/completions", body) for i in range(8)]
        info = {"endpoint": "/v1/completions", "input_file_id": "file-x", "errors": []}
        job = BatchJob("batch_expiring", "a", lines, info)
        app.state.batch_runner.start(job, [(b"authorization", b"Bearer key-a")], None)
        while job.results[0] is None:
            await asyncio.sleep(0.001)
        job.expires_at = time.time()  # (as if 24 hours had passed)
        await asyncio.wait_for(job.ended.wait(), 30)
        outcomes = [r.outcome for r in job.results if r is not None]
        assert outcomes[0] == "succeeded" and outcomes[-1] == "expired", outcomes
        assert outcomes == sorted(outcomes, key=["succeeded", "expired"].index)  # in order
        card = (await client.get("/v1/batches/batch_expiring", headers=A)).json()
        assert card["status"] == "expired" and card["expired_at"] is not None
        assert card["request_counts"]["failed"] == outcomes.count("expired")

    _run(tmp_path, test, batch_in_flight=1)


def test_a_tenants_batches_hold_bounded_bytes(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        def batch(num: int, size: int) -> dict[str, Any]:
            params = {"max_tokens": 1, "messages": [{"role": "user", "content": "x" * size}]}
            return {"requests": [{"custom_id": f"r{i}", "params": params} for i in range(num)]}

        r = await client.post("/v1/messages/batches", json=batch(8, 1000), headers=A)
        assert r.status_code == 400 and "--max-stored-file-bytes" in r.text
        first = await client.post("/v1/messages/batches", json=batch(2, 1000), headers=A)
        assert first.status_code == 200, first.text
        job = ctx_runner(client).get("a", first.json()["id"], "msgbatch_")
        await asyncio.wait_for(job.ended.wait(), 30)
        # Past a bound (here the count) the oldest ended batch goes: the next one is taken.
        again = await client.post("/v1/messages/batches", json=batch(4, 1000), headers=A)
        assert again.status_code == 200, again.text
        gone = await client.get(f"/v1/messages/batches/{first.json()['id']}", headers=A)
        assert gone.status_code == 404
        other = await client.post("/v1/messages/batches", json=batch(4, 1000), headers=B)
        assert other.status_code == 200  # another tenant's bound is its own

    _run(tmp_path, test, max_stored_file_bytes=6000, max_stored_batches=1)


def ctx_runner(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.batch_runner  # type: ignore[attr-defined]


def test_a_line_waiting_to_retry_leaves_its_slot_to_others(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        slow = [_line(f"a{i}", {"prompt": "~abc", "max_tokens": 100}) for i in range(4)]
        a = await _create(client, await _upload(client, slow))  # A: one request at a time
        while len(sched.received) < 1:
            await asyncio.sleep(0.001)
        quick = [_line("b0", {"prompt": "xyz", "max_tokens": 1})]
        b = await _create(client, await _upload(client, quick, B), B)
        runner = ctx_runner(client)
        await asyncio.wait_for(runner.get("b", b["id"], "batch_").ended.wait(), 30)
        # B ran while A's first line did: A's refused line waited without holding a slot.
        assert runner.get("a", a["id"], "batch_").counts()["succeeded"] == 0
        sched.release.set()  # (A's lines, held until now, finish)
        await asyncio.wait_for(runner.get("a", a["id"], "batch_").ended.wait(), 60)

    _run(tmp_path, test, {"max_requests_per_tenant": 1}, batch_in_flight=2)


def test_batch_outputs_make_room_by_dropping_the_oldest_outputs(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        file_id = await _upload(client, [_line("r", {"prompt": "abc", "max_tokens": 1})])
        outputs = []
        for _ in range(6):
            done = await _ended(client, (await _create(client, file_id))["id"])
            outputs.append(done["output_file_id"])
        files = (await client.get("/v1/files", headers=A)).json()["data"]
        assert len(files) * 4096 <= 20_000  # every file counts at least 4 KiB
        assert file_id in [f["id"] for f in files]  # the upload stays: only outputs go
        assert outputs[-1] in [f["id"] for f in files]
        gone = await client.get(f"/v1/files/{outputs[0]}/content", headers=A)
        assert gone.status_code == 404

    _run(tmp_path, test, max_stored_file_bytes=20_000)
