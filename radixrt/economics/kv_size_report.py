"""The human-readable report of `radixrt kv-size`: a KvSizing (kv_size.py) as lines of text,
each size in GB and GiB side by side."""

from __future__ import annotations

from radixrt.economics.kv_bytes import DTYPE_BYTES, KV_ROW_SCALE_BYTES, fmt_bytes
from radixrt.economics.kv_size import KvSizing


def format_kv_sizing(s: KvSizing, gpu_label: str | None = None) -> str:
    """The human-readable report of `radixrt kv-size`; a model with window layers gets its
    per-request figures and what fits both in one pool and with a window pool."""
    f, q = s.facts, s.query
    kv_dtype = q.kv_dtype_or_default
    lines = [
        f"model:       {f.name}  [{f.source}]",
        f"             {f.num_layers} layers, hidden {f.hidden_size}, {f.num_heads} heads, "
        f"{f.num_kv_heads} KV heads, head dim {f.head_dim}, vocab {f.vocab_size:,}, "
        f"{fmt_params(f.num_params)} parameters",
        f"KV per token ({kv_dtype}): {s.bytes_per_token:,} bytes = 2 x {f.num_layers} layers x "
        f"{f.num_kv_heads} KV heads x {f.head_dim} head dim x {_nbytes(DTYPE_BYTES[kv_dtype])}"
        + (f" (+ a {KV_ROW_SCALE_BYTES[kv_dtype]}-byte scale per KV head)"
           if kv_dtype in KV_ROW_SCALE_BYTES else ""),
    ]  # fmt: skip
    if f.num_kv_heads < f.num_heads:
        lines.append(
            f"             GQA: {s.gqa_ratio:.1f}x smaller than MHA "
            f"({f.num_heads} KV heads would take {s.mha_bytes_per_token:,} bytes per token)"
        )
    paged = q.tokens_per_request
    rounded = "" if paged == q.context_len else f" ({paged:,} in pages of {q.page_size})"
    per_request, total = fmt_bytes(s.bytes_per_request), fmt_bytes(s.total_bytes)
    if s.has_windows:
        window_tokens = min(paged, f.sliding_window)
        lines.append(
            f"windows:     {f.num_window_layers} of {f.num_layers} layers see the last "
            f"{f.sliding_window:,} tokens: a window pool keeps their K/V for those only"
        )
        per_request += (
            f" in one pool; {fmt_bytes(s.window_bytes_per_request)} with a window pool "
            f"({f.num_full_layers} layers x {paged:,} tokens + {f.num_window_layers} x "
            f"{window_tokens:,})"
        )
        total += f" in one pool; {fmt_bytes(s.window_total_bytes)} with a window pool"
    lines += [
        f"per request: {q.context_len:,} tokens{rounded}: {per_request}",
        f"in total:    {q.batch_size} x {q.context_len:,} tokens: {total}",
    ]
    if s.fit is not None:
        lines += _gpu_lines(s, gpu_label)
    return "\n".join(lines)


def _gpu_lines(s: KvSizing, gpu_label: str | None) -> list[str]:
    f, q, g = s.facts, s.query, s.fit
    assert g is not None
    lines = [
        f"GPU:         {gpu_label or 'memory'} {fmt_bytes(g.memory_bytes)} x {g.mem_fraction} "
        f"(--mem-fraction-static) = {fmt_bytes(g.usable_bytes)}",
        f"weights:     {fmt_params(f.num_params)} x {_nbytes(DTYPE_BYTES[q.dtype])} ({q.dtype}) = "
        f"{fmt_bytes(g.weight_bytes)}",
    ]
    if g.kv_room_bytes <= 0:
        lines.append(
            f"KV room:     none: the weights exceed the usable memory by "
            f"{fmt_bytes(-g.kv_room_bytes)}"
        )
        return lines
    one_pool = " in one pool" if s.has_windows else ""
    lines += [
        f"KV room:     {fmt_bytes(g.kv_room_bytes)} = {g.max_tokens:,} tokens = "
        f"{g.num_pages:,} pages of {q.page_size}",
        f"fits:        {g.max_requests:,} requests of {q.context_len:,} tokens{one_pool} "
        f"({_enough(g.max_requests, q.batch_size)})",
    ]
    if s.has_windows:
        lines += _window_pool_lines(s)
    return lines


def _window_pool_lines(s: KvSizing) -> list[str]:
    f, q, g = s.facts, s.query, s.fit
    assert g is not None
    w = g.window
    if w is None:
        why = f"pages of {q.page_size}" if q.page_size > 1 else "too little room to split"
        return [f"window pool: none ({why}): radixrt keeps one pool"]
    return [
        f"window pool: {w.full_slots:,} slots for the {f.num_full_layers} full layers + "
        f"{w.window_slots:,} for the {f.num_window_layers} window layers "
        f"(--window-kv-fraction {w.window_kv_fraction})",
        f"fits:        {w.max_requests:,} requests of {q.context_len:,} tokens with the window "
        f"pool ({_enough(w.max_requests, q.batch_size)})",
    ]


def _enough(num_requests: int, batch_size: int) -> str:
    return f"{'enough' if num_requests >= batch_size else 'not enough'} for --batch {batch_size}"


def fmt_params(n: int) -> str:
    """'70.55 B', '134.5 M'."""
    return f"{n / 1e9:,.2f} B" if n >= 10**9 else f"{n / 1e6:,.1f} M"


def _nbytes(n: int) -> str:
    return "1 byte" if n == 1 else f"{n} bytes"
