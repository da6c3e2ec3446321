"""`GET /dashboard` (the page: static, nothing secret in it, served without a key) and
`GET /dashboard/data` (its figures, admin only like /get_server_info)."""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.dashboard.recorder import DashboardRecorder
from radixrt.serve.http.dashboard.render import dashboard_data
from radixrt.serve.web.middleware import caller_of, require_admin
from radixrt.serve.web.responses import json_response

MAX_ROWS = 20  # subtree rows the page shows
# The page loads nothing from anywhere (no CDN, no fonts) and talks only to this server.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
}


def add_dashboard_routes(
    app: FastAPI, tm: Any, recorder: DashboardRecorder, model_name: str
) -> None:
    """`tm`: the TokenizerManager or the --dp dispatcher; `recorder`: the one it feeds."""
    page = load_page()

    @app.get("/dashboard")
    async def dashboard() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    @app.get("/dashboard/data")
    async def data(request: Request) -> Response:
        require_admin(request, "/dashboard/data")
        info, summary = await asyncio.gather(tm.get_info(), tm.cache_summary(MAX_ROWS))
        body = await tm.run_tokenizer(
            dashboard_data,
            info,
            summary,
            recorder,
            tm.tokenizer,
            model_name,
            len(tm.states),
            caller=caller_of(request),
        )
        return json_response(body)


def load_page() -> bytes:
    """page.html with dashboard.css and dashboard.js put in (one response, no other loads)."""
    here = resources.files(__package__)
    html = (here / "page.html").read_text("utf-8")
    css = (here / "dashboard.css").read_text("utf-8")
    js = (here / "dashboard.js").read_text("utf-8")
    html = html.replace("<!-- style -->", f"<style>\n{css}</style>")
    return html.replace("<!-- script -->", f"<script>\n{js}</script>").encode()
