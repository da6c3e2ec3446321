"""Jupyter display of a program state: the conversation with generated spans highlighted, and
the prompt/cached/completion tokens of every call."""

from __future__ import annotations

import html
from typing import Any

from radixrt_lang.exec_types import Span
from radixrt_lang.interpreter import StateExecutor

_STYLE = """<style>
.rt-state{font-family:ui-monospace,monospace;font-size:13px;line-height:1.45}
.rt-msg{border-left:3px solid #bbb;margin:4px 0;padding:2px 8px;white-space:pre-wrap}
.rt-role{font-weight:bold;color:#555;font-size:11px;text-transform:uppercase}
.rt-gen{background:#d7f5dd;border-radius:3px}.rt-select{background:#dbe8ff;border-radius:3px}
.rt-calls{border-collapse:collapse;margin-top:6px;font-size:12px}
.rt-calls td,.rt-calls th{border:1px solid #ddd;padding:1px 6px;text-align:right}
</style>"""


def state_html(ex: StateExecutor) -> str:
    """HTML for one state (the caller has synced it)."""
    with ex.cond:
        text, turns, spans = ex.text, list(ex.turns), list(ex.spans)
        error = ex.error
    blocks = [_block(role, _marked(text, start, end, spans)) for role, start, end in turns]
    if not turns:
        blocks = [_block(None, _marked(text, 0, len(text), spans))]
    parts = [_STYLE, '<div class="rt-state">', *blocks, _calls_table(spans)]
    if error is not None:
        parts.append(f'<div style="color:#b00">error: {html.escape(str(error))}</div>')
    parts.append("</div>")
    return "".join(parts)


def _block(role: str | None, body: str) -> str:
    label = f'<div class="rt-role">{html.escape(role)}</div>' if role else ""
    return f'<div class="rt-msg">{label}{body}</div>'


def _marked(text: str, start: int, end: int, spans: list[Span]) -> str:
    """text[start:end], escaped, with the spans inside it wrapped in highlight tags."""
    out, pos = [], start
    for sp in sorted(spans, key=lambda s: s.start):
        a, b = max(sp.start, start), min(sp.end, end)
        if a >= b or a < pos:
            continue
        out.append(html.escape(text[pos:a]))
        title = html.escape(f"{sp.kind} {sp.name or ''}".strip())
        out.append(f'<span class="rt-{sp.kind}" title="{title}">{html.escape(text[a:b])}</span>')
        pos = b
    out.append(html.escape(text[pos:end]))
    return "".join(out)


def _calls_table(spans: list[Span]) -> str:
    rows = []
    for sp in spans:
        m: dict[str, Any] = sp.meta
        cells = [
            sp.kind,
            sp.name or "",
            m.get("prompt_tokens"),
            m.get("cached_tokens"),
            m.get("completion_tokens", ""),
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    if not rows:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("call", "var", "prompt", "cached", "completion"))
    return f'<table class="rt-calls"><tr>{head}</tr>{"".join(rows)}</table>'
