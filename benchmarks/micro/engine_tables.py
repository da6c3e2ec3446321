"""The engine benchmark's tables (markdown), from its measured rows."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.micro.engine_rows import DecodeRow, PrefillRow


def format_tables(
    prefill: list[PrefillRow], decode: list[DecodeRow], args: argparse.Namespace
) -> str:
    """Two markdown tables: prefill tokens/s by prompt length, decode tokens/s by batch size."""
    lines = [
        f"prefill: one prompt of random tokens, best of {args.rounds} x {args.repeats}; "
        "roofline: the row's best matmul probe / (2 x params); exact: the same rate over the "
        "prompt's FLOPs (attention included, LM head once)",
        "",
        "| prompt tokens | radixrt tok/s | transformers tok/s | radixrt/transformers "
        "| roofline tok/s | radixrt/roofline | radixrt/exact roofline | first token same "
        "| others' CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for r in prefill:
        lines.append(
            f"| {r.prompt_len} | {r.radixrt_tok_s:.0f} | {_fmt(r.hf_tok_s, '.0f')} "
            f"| {_ratio(r.radixrt_tok_s, r.hf_tok_s)} | {r.roofline_tok_s:.0f} "
            f"| {r.radixrt_tok_s / r.roofline_tok_s:.2f} "
            f"| {r.radixrt_tok_s / r.exact_roofline_tok_s:.2f} | {_fmt(r.first_token_match)} "
            f"| {_pct(r.other_cpu)} |"
        )
    lines += [
        "",
        f"decode: prompts of {args.decode_prompt_len} random tokens, median of "
        f"{args.rounds} x {args.decode_steps} steps (mean in brackets); roofline from the "
        "row's best probes",
        "",
        "| batch | radixrt tok/s | radixrt ms/step | transformers tok/s | transformers ms/step "
        "| radixrt/transformers | roofline tok/s (ms/step) | radixrt/roofline "
        "| greedy tokens same | others' CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for r in decode:
        hf_ms = "-" if r.hf_ms_step is None else f"{r.hf_ms_step:.0f} ({r.hf_ms_mean:.0f})"
        match = "-" if r.greedy_match is None else f"{r.greedy_match}/{r.batch_size}"
        lines.append(
            f"| {r.batch_size} | {r.radixrt_tok_s:.1f} "
            f"| {r.radixrt_ms_step:.0f} ({r.radixrt_ms_mean:.0f}) | {_fmt(r.hf_tok_s, '.1f')} "
            f"| {hf_ms} | {_ratio(r.radixrt_tok_s, r.hf_tok_s)} "
            f"| {r.roofline_tok_s:.0f} ({r.roofline_ms_step:.0f}) "
            f"| {r.radixrt_tok_s / r.roofline_tok_s:.2f} | {match} | {_pct(r.other_cpu)} |"
        )
    return "\n".join(lines)


def _ratio(a: float, b: float | None) -> str:
    return "-" if b is None else f"{a / b:.2f}"


def _fmt(x: float | bool | None, spec: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    return format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"
