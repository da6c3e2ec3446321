"""What the control endpoints answer: the model, the server (its configs, the scheduler's
figures, the pool's sizing) and the caller's own usage."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec

from radixrt.core.messages import InfoReplyMsg, ReadyMsg
from radixrt.serve.http.args import ServerArgs
from radixrt.serve.http.cache_handles import CacheHandle
from radixrt.serve.http.protocol import Limits


def model_info(ready: ReadyMsg, model_name: str, tokenizer: Any, limits: Limits) -> dict[str, Any]:
    return {
        "model_path": ready.model_path,
        "served_model_name": model_name,
        "chat_template": getattr(tokenizer, "chat_template", None),
        "context_length": limits.context_length,
        "vocab_size": limits.vocab_size,
    }


def server_info(
    info: dict[str, Any], ready: ReadyMsg, args: ServerArgs, kv_sizing: dict[str, Any]
) -> dict[str, Any]:
    """`info` (the scheduler's figures, merged with the HTTP side's) with the configs."""
    server = dataclasses.asdict(args.server)
    server["api_key"] = None if server["api_key"] is None else "***"
    return {
        **info,
        "kv_pool_bytes": ready.kv_pool_bytes,
        "kv_sizing": kv_sizing,
        "device": ready.device,
        "dtype": ready.dtype,
        "kv_dtype": ready.kv_dtype or ready.dtype,
        "weight_dtype": ready.weight_dtype or ready.dtype,
        "model_config": dataclasses.asdict(args.model),
        "cache_config": dataclasses.asdict(args.cache),
        "scheduler_config": dataclasses.asdict(args.scheduler),
        # what a None in scheduler_config resolved to on this device
        "effective_chunked_prefill_size": args.scheduler.prefill_chunk(ready.device.split(":")[0]),
        "server_config": server,
    }


def handles_usage(mine: list[CacheHandle]) -> dict[str, Any]:
    """The caller's cache handles in its /v1/usage."""
    return {
        "handles": len(mine),
        "tokens": sum(h.tokens for h in mine),
        "token_hours": round(sum(h.token_hours() for h in mine), 6),
    }


def pool_sizing(ready: ReadyMsg, tp_size: int) -> dict[str, Any]:
    """The pool's figures by `radixrt kv-size`'s arithmetic (radixrt/economics), next to the
    measured ones, its window pool included; {"error": ...} when the model folder cannot be
    read for it."""
    from radixrt.economics.model_facts import facts_from_folder
    from radixrt.economics.pool_figures import pool_figures

    try:
        facts = facts_from_folder(Path(ready.model_path), exact_params=False)
        kv_dtype = ready.kv_dtype or ready.dtype
        return pool_figures(facts, kv_dtype, ready.max_total_tokens, ready.kv_pool_bytes,
                            ready.context_length, tp_size, ready.window_pool_tokens,
                            ready.num_window_layers)  # fmt: skip
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def info_dict(info: InfoReplyMsg) -> dict[str, Any]:
    """The scheduler's figures (the reply without its id)."""
    out = msgspec.structs.asdict(info)
    out.pop("reply_id")
    return out
