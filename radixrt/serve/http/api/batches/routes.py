"""The batch routes: OpenAI's /v1/files and /v1/batches, Anthropic's /v1/messages/batches
(errors in Anthropic's shape there: its dialect owns the /v1/messages prefix), Gemini's
models/{m}:batchGenerateContent and batches/{id} under /v1beta and /v1 (where GET /v1/batches
and /v1/batches/{id} are Gemini's for google-genai's requests only, OpenAI's otherwise). One
runner and one file store serve them all; a tenant sees only its own batches and files."""

from __future__ import annotations

import uuid

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.batches import anthropic_format as anthropic
from radixrt.serve.http.api.batches import gemini_format as gemini
from radixrt.serve.http.api.batches import openai_format as openai
from radixrt.serve.http.api.batches.files import FileStore
from radixrt.serve.http.api.batches.in_process import carried_headers
from radixrt.serve.http.api.batches.jobs import ENDED, BatchJob, BatchNotFoundError
from radixrt.serve.http.api.batches.runner import BatchRunner, OnEnd
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.gemini.protocol import model_resource
from radixrt.serve.http.api.gemini.routes import GeminiClientRoute
from radixrt.serve.http.api.responses.listing import page
from radixrt.serve.http.cache_handles import owner_of
from radixrt.serve.http.http_errors import respond
from radixrt.serve.http.protocol import BadRequestError, check_metadata, decode_body
from radixrt.serve.web.middleware import caller_of
from radixrt.serve.web.responses import json_response

BODIES = {"/v1/batches": openai.BatchCreate, anthropic.PATH: anthropic.BatchCreate}
MAX_FILES_LISTED = 10000


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    config = ctx.args.server
    files = FileStore(config.max_stored_file_bytes)
    runner = BatchRunner(
        app, config.batch_in_flight, config.max_stored_batches, config.max_stored_file_bytes
    )
    app.state.batch_runner = runner

    @app.exception_handler(BatchNotFoundError)
    async def not_found(request: Request, exc: Exception) -> Response:
        return respond(request, str(exc), 404)

    def start(request: Request, job: BatchJob, on_end: OnEnd | None = None) -> None:
        client = None if request.client is None else (request.client.host, request.client.port)
        runner.start(job, carried_headers(request.headers.raw), client, on_end)

    # -- OpenAI: files --------------------------------------------------------------------
    @app.post("/v1/files")
    async def upload(request: Request) -> Response:
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise BadRequestError("upload a file as multipart/form-data with `file` and `purpose`")
        async with request.form(max_files=1, max_fields=8) as form:
            upload, purpose = form.get("file"), form.get("purpose")
            if not isinstance(upload, UploadFile):
                raise BadRequestError("file: missing (a multipart file field)")
            if not isinstance(purpose, str):
                raise BadRequestError("purpose: missing")
            anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
            expires = None
            if anchor is not None or seconds is not None:
                if not isinstance(seconds, str) or not seconds.isdigit():
                    raise BadRequestError("expires_after[seconds]: an integer is needed")
                expires = openai.ExpiresAfter(str(anchor), int(seconds)).check("expires_after")
            data = await upload.read()
            name = upload.filename or "upload"
        stored = files.add(owner_of(request), name, purpose, data, expires)
        return json_response(stored.card())

    @app.get("/v1/files")
    async def list_files(request: Request) -> Response:
        query = dict(request.query_params)
        purpose = query.pop("purpose", None)
        cards = [f.card() for f in files.list(owner_of(request)) if purpose in (None, f.purpose)]
        query.setdefault("limit", str(MAX_FILES_LISTED))
        return json_response(page(cards, query, "file", MAX_FILES_LISTED))

    @app.get("/v1/files/{file_id}")
    async def get_file(request: Request, file_id: str) -> Response:
        return json_response(files.get(owner_of(request), file_id).card())

    @app.get("/v1/files/{file_id}/content")
    async def file_content(request: Request, file_id: str) -> Response:
        stored = files.get(owner_of(request), file_id)
        return Response(stored.data, media_type="application/octet-stream")

    @app.delete("/v1/files/{file_id}")
    async def delete_file(request: Request, file_id: str) -> Response:
        files.delete(owner_of(request), file_id)
        return json_response({"id": file_id, "object": "file", "deleted": True})

    # -- OpenAI: batches ------------------------------------------------------------------
    @app.post("/v1/batches")
    async def create_batch(request: Request) -> Response:
        body: openai.BatchCreate = decode_body(await request.body(), openai.BatchCreate)
        body.check()
        check_metadata(body.metadata)
        owner = owner_of(request)
        source = files.get(owner, body.input_file_id)
        if source.purpose != "batch":
            raise BadRequestError(f"input_file_id: file {source.id} has purpose "
                                  f"{source.purpose!r}, not 'batch'")  # fmt: skip
        lines, errors = await ctx.tm.run_tokenizer(  # (off the event loop: up to 50k lines)
            openai.input_lines, source.data, body.endpoint, config.max_batch_requests,
            caller=caller_of(request),
        )  # fmt: skip
        info = {"endpoint": body.endpoint, "input_file_id": source.id, "errors": errors,
                "metadata": body.metadata}  # fmt: skip
        keep = body.output_expires_after
        keep_s = None if keep is None else keep.seconds
        job = BatchJob(openai.KIND + uuid_hex(), owner, [] if errors else lines, info)

        def write_files(job: BatchJob) -> None:
            output, failed = openai.result_files(job)
            for data, key in ((output, "output_file_id"), (failed, "error_file_id")):
                if data:
                    stored = files.add(owner, f"{job.id}_{key[:-8]}.jsonl", "batch_output",
                                       data, keep_s, written=True)  # fmt: skip
                    job.info[key] = stored.id

        start(request, job, write_files)
        return json_response(openai.batch_card(job, ctx.model_name))

    @app.get("/v1/batches")
    async def list_batches(request: Request) -> Response:
        jobs = {job.id: job for job in runner.jobs(owner_of(request), openai.KIND)[::-1]}
        listed = page([{"id": i} for i in jobs], dict(request.query_params), "batch")
        listed["data"] = [
            openai.batch_card(jobs[x["id"]], ctx.model_name) for x in listed["data"]
        ]  # fmt: skip  (cards of the page only)
        return json_response(listed)

    @app.get("/v1/batches/{batch_id}")
    async def get_batch(request: Request, batch_id: str) -> Response:
        job = runner.get(owner_of(request), batch_id, openai.KIND)
        return json_response(openai.batch_card(job, ctx.model_name))

    @app.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(request: Request, batch_id: str) -> Response:
        job = runner.get(owner_of(request), batch_id, openai.KIND)
        runner.cancel(job)
        return json_response(openai.batch_card(job, ctx.model_name))

    # -- Anthropic: message batches -------------------------------------------------------
    path = anthropic.PATH

    @app.post(path)
    async def create_message_batch(request: Request) -> Response:
        lines = await ctx.tm.run_tokenizer(  # (off the event loop, as every body is parsed)
            anthropic.parse_batch, await request.body(), config.max_batch_requests,
            caller=caller_of(request),
        )  # fmt: skip
        job = BatchJob(anthropic.KIND + uuid_hex(), owner_of(request), lines)
        start(request, job)
        return json_response(anthropic.batch_card(job))

    @app.get(path)
    async def list_message_batches(request: Request) -> Response:
        jobs = runner.jobs(owner_of(request), anthropic.KIND)
        return json_response(anthropic.batch_page(jobs, dict(request.query_params)))

    @app.get(path + "/{batch_id}")
    async def get_message_batch(request: Request, batch_id: str) -> Response:
        job = runner.get(owner_of(request), batch_id, anthropic.KIND)
        return json_response(anthropic.batch_card(job))

    @app.get(path + "/{batch_id}/results")
    async def message_batch_results(request: Request, batch_id: str) -> Response:
        job = runner.get(owner_of(request), batch_id, anthropic.KIND)
        if job.status != ENDED:
            raise BadRequestError(f"batch {batch_id} has not ended: its results come when it has")
        data = await ctx.tm.run_tokenizer(  # (off the event loop: up to the tenant's bound)
            anthropic.results_file, job, caller=caller_of(request)
        )
        return Response(data, media_type="application/x-jsonl")

    @app.post(path + "/{batch_id}/cancel")
    async def cancel_message_batch(request: Request, batch_id: str) -> Response:
        job = runner.get(owner_of(request), batch_id, anthropic.KIND)
        runner.cancel(job)
        return json_response(anthropic.batch_card(job))

    @app.delete(path + "/{batch_id}")
    async def delete_message_batch(request: Request, batch_id: str) -> Response:
        runner.forget(runner.get(owner_of(request), batch_id, anthropic.KIND))
        return json_response({"id": batch_id, "type": "message_batch_deleted"})

    # -- Gemini: batch mode, under /v1beta and /v1 (the SDK's default) ------------------
    async def create_gemini_batch(request: Request, model: str) -> Response:
        prefix = request.url.path.split("/models/")[0]
        path = f"{prefix}/models/{model}:generateContent"
        lines, info, size = await ctx.tm.run_tokenizer(
            gemini.parse_batch, await request.body(), path, config.max_batch_requests,
            caller=caller_of(request),
        )  # fmt: skip
        info["model"] = model_resource(model)
        job = BatchJob(gemini.KIND + uuid_hex(), owner_of(request), lines, info, extra_bytes=size)
        start(request, job)
        return json_response(gemini.batch_operation(job))

    async def list_gemini_batches(request: Request) -> Response:
        jobs = runner.jobs(owner_of(request), gemini.KIND)
        return json_response(gemini.operations_page(jobs, dict(request.query_params)))

    async def get_gemini_batch(request: Request, batch_id: str) -> Response:
        job = runner.get(owner_of(request), batch_id, gemini.KIND)
        return json_response(gemini.batch_operation(job))

    async def cancel_gemini_batch(request: Request, batch_id: str) -> Response:  # "{id}:cancel"
        batch_id, _, method = batch_id.partition(":")
        if method != "cancel":
            raise BatchNotFoundError(f"no method {method!r} on batches; radixrt serves cancel")
        runner.cancel(runner.get(owner_of(request), batch_id, gemini.KIND))
        return json_response({})

    async def delete_gemini_batch(request: Request, batch_id: str) -> Response:
        runner.forget(runner.get(owner_of(request), batch_id, gemini.KIND), cancel=True)
        return json_response({})

    for prefix in ("/v1beta", "/v1"):
        # Ahead of the Gemini dialect's POST {prefix}/models/{model} (its other methods).
        create = APIRoute(prefix + "/models/{model}:batchGenerateContent",
                          create_gemini_batch, methods=["POST"])  # fmt: skip
        app.router.routes.insert(0, create)
        # GET /v1/batches and /v1/batches/{id} are OpenAI's too: Gemini's for its client only.
        kind = APIRoute if prefix == "/v1beta" else GeminiClientRoute
        for path, endpoint in ((prefix + "/batches", list_gemini_batches),
                               (prefix + "/batches/{batch_id}", get_gemini_batch)):  # fmt: skip
            app.router.routes.insert(0, kind(path, endpoint, methods=["GET"]))
        app.add_api_route(prefix + "/batches/{batch_id}", cancel_gemini_batch, methods=["POST"])
        app.add_api_route(prefix + "/batches/{batch_id}", delete_gemini_batch, methods=["DELETE"])


def uuid_hex() -> str:
    return uuid.uuid4().hex
