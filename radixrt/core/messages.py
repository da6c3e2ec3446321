"""Typed messages between the HTTP process and the scheduler process (msgpack over ZMQ).

Every message is a tagged msgspec Struct, so a decoder checks types on the way in and nothing
is pickled. Token outputs are incremental: each BatchTokenOutMsg carries only the tokens a
request gained since the previous one; the HTTP side accumulates them.
"""

from __future__ import annotations

import msgspec

from radixrt.core import FinishKind, FinishReason, PinOutcome, PinSpec, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.core.step_times import StepTimesMsg

TopLogprobs = list[tuple[float, int]]  # [(logprob, token id), ...] best first


# ---- HTTP process -> scheduler -------------------------------------------------------------


class GenerateReqMsg(msgspec.Struct, tag=True):
    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams  # validated at the edge (from_dict), n == 1
    extra_key: str | None = None
    pins: list[PinSpec] = []  # prefixes to pin once it finishes (radixrt/cache/pins.py)


class AbortReqMsg(msgspec.Struct, tag=True):
    rid: str


class FlushCacheReqMsg(msgspec.Struct, tag=True):
    reply_id: int
    disk: bool = False  # also delete the disk tier's block files of this model


class GetInfoReqMsg(msgspec.Struct, tag=True):
    reply_id: int


class ExplainReqMsg(msgspec.Struct, tag=True):
    """Why `input_ids` would miss the cache in namespace `extra_key`; namespaces starting
    with `own_prefix` are the caller's too (None: no other)."""

    reply_id: int
    input_ids: list[int]
    extra_key: str | None = None
    own_prefix: str | None = None


class CacheSummaryReqMsg(msgspec.Struct, tag=True):
    """The dashboard's view of the prefix cache: its largest subtrees (at most `max_rows`
    rows, radixrt/cache/tree_summary.py) and the recent misses (radixrt/scheduler/misses.py)."""

    reply_id: int
    max_rows: int = 20


class PinUpdateReqMsg(msgspec.Struct, tag=True):
    """Give pin `pin_id` a new expiry (wall clock), or drop it (None)."""

    reply_id: int
    pin_id: str
    expire_at: float | None = None


class StopMsg(msgspec.Struct, tag=True):
    """Ends the scheduler loop after the current step (the Engine's shutdown)."""


ToSchedulerMsg = (
    GenerateReqMsg
    | AbortReqMsg
    | FlushCacheReqMsg
    | GetInfoReqMsg
    | ExplainReqMsg
    | CacheSummaryReqMsg
    | PinUpdateReqMsg
    | StopMsg
)


# ---- scheduler -> HTTP process -------------------------------------------------------------


class FinishMsg(msgspec.Struct):
    type: str  # a FinishKind value: stop, length, abort
    matched: int | str | None = None
    message: str | None = None
    status_code: int | None = None  # an error finish (FinishReason.status_code)


class ReqOutMsg(msgspec.Struct, array_like=True):
    """One request's progress in one step: tokens and logprobs gained since the last message."""

    rid: str
    new_ids: list[int]
    new_logprobs: list[float]
    new_top_logprobs: list[TopLogprobs]
    finish: FinishMsg | None
    cached_tokens: int
    # Prompt-token logprobs, sent once with the finishing message when asked for.
    input_logprobs: list[float | None] = []
    input_top_logprobs: list[TopLogprobs | None] = []
    input_token_ranks: list[int | None] = []  # each prompt token's rank (1: the likeliest)
    pins: list[PinOutcome] = []  # with the finishing message: one per GenerateReqMsg.pins
    # With lower tiers: cached_tokens per tier ("device", "host", "disk") and the load time.
    cached_tokens_by_tier: dict[str, int] = {}
    cache_load_s: float = 0.0
    # With speculative decoding: tokens drafted for it so far, those accepted, and the steps
    # that sampled for it (totals).
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_steps: int = 0
    # Of those, drafted from its predicted output (SamplingParams.prediction_ids), and kept.
    prediction_drafted: int = 0
    prediction_accepted: int = 0


class BatchTokenOutMsg(msgspec.Struct, tag=True):
    outputs: list[ReqOutMsg]
    num_running: int
    num_waiting: int


class ReadyMsg(msgspec.Struct, tag=True):
    """Sent once the model and KV pool are up."""

    model_path: str  # the resolved local folder (the tokenizer loads from here)
    max_total_tokens: int
    kv_pool_bytes: int
    context_length: int
    vocab_size: int
    device: str
    dtype: str
    # A window pool for sliding-window layers (cache/window_base.py): its slots and how many
    # layers keep their K/V there; 0: none, every layer in the max_total_tokens pool.
    window_pool_tokens: int = 0
    num_window_layers: int = 0
    kv_dtype: str = ""  # the KV pool's element type ("": the same as dtype)
    # The linear layers' weights where they differ from dtype (the activations'): "bfloat16" or
    # "int8" on the CPU kernels; "": the same as dtype.
    weight_dtype: str = ""


class TierInfoMsg(msgspec.Struct):
    """One lower KV tier's figures (radixrt/cache/tiers/), for /get_server_info and /metrics."""

    name: str
    blocks: int
    tokens: int
    bytes: int
    capacity_bytes: int
    stored_blocks: int
    dropped_blocks: int
    hit_tokens: int
    loaded_blocks: int
    load_s: float
    corrupt_blocks: int
    write_errors: int


class InfoReplyMsg(msgspec.Struct, tag=True):
    reply_id: int
    max_total_tokens: int
    free_tokens: int
    evictable_tokens: int
    protected_tokens: int
    num_running_reqs: int
    num_queued_reqs: int
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    cache_hit_rate: float
    forward_passes: int
    retractions: int
    pinned_tokens: int = 0
    num_pins: int = 0
    tiers: list[TierInfoMsg] = []  # the lower KV tiers, top first
    # Speculative decoding: tokens drafted and accepted, request steps that verified a draft
    # and the tokens they emitted; draft trees: branched verifications, their leaves, and
    # those accepted off the first branch; drafts verified in a prompt's own pass: its
    # request steps and their accepted tokens (SchedulerStats).
    spec_drafted_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_verify_steps: int = 0
    spec_emitted_tokens: int = 0
    spec_tree_steps: int = 0
    spec_tree_branches: int = 0
    spec_tree_side_accepts: int = 0
    spec_prompt_end_steps: int = 0
    spec_prompt_end_accepted: int = 0
    # Wall seconds of the steps that ran a pass: in the forward, in the whole step; and per
    # step, by kind (core/step_times.py).
    forward_time_s: float = 0.0
    step_time_s: float = 0.0
    step_times: list[StepTimesMsg] = []


class FlushCacheReplyMsg(msgspec.Struct, tag=True):
    reply_id: int
    success: bool
    tiers: list[str] = []  # what was cleared: "device", "host", "disk"


class PinUpdateReplyMsg(msgspec.Struct, tag=True):
    reply_id: int
    found: bool


class ExplainReplyMsg(msgspec.Struct, tag=True):
    """radixrt.cache.explain.Explanation's fields."""

    reply_id: int
    cause: str
    prompt_tokens: int
    matched_tokens: int
    divergence: int | None = None
    cached_next: list[int] = []
    evicted_at: float | None = None
    other_namespace_tokens: int = 0


class SubtreeMsg(msgspec.Struct):
    """radixrt.cache.tree_summary.Subtree's fields."""

    extra_key: str | None
    depth: int
    offset: int
    tokens: int
    nodes: int
    hits: int
    idle_s: float
    pinned_tokens: int
    locked_tokens: int
    prefix_ids: list[int]
    replica: str = ""  # which replica's tree, set by the --dp dispatcher


class MissMsg(msgspec.Struct):
    """One radixrt.scheduler.misses.Miss: the request, and its Explanation's fields."""

    at: float
    extra_key: str | None
    prompt_tokens: int
    cached_tokens: int
    cause: str
    matched_tokens: int
    divergence: int | None
    cached_next: list[int]
    evicted_at: float | None
    other_namespace_tokens: int
    context_start: int
    context_ids: list[int]
    replica: str = ""


class CacheSummaryReplyMsg(msgspec.Struct, tag=True):
    reply_id: int
    num_nodes: int
    walked_nodes: int
    truncated: bool
    subtrees: list[SubtreeMsg]
    num_misses: int  # since start
    misses_by_cause: dict[str, int]  # the explained misses since start
    misses: list[MissMsg]  # newest first


class ControlErrorMsg(msgspec.Struct, tag=True):
    """A control question (flush, info, explain, summary, pin) raised in the scheduler: the
    answer to `reply_id`; the scheduler goes on."""

    reply_id: int
    message: str


class FatalErrorMsg(msgspec.Struct, tag=True):
    """The scheduler loop failed; the process exits right after sending this."""

    message: str


FromSchedulerMsg = (
    BatchTokenOutMsg
    | ReadyMsg
    | InfoReplyMsg
    | FlushCacheReplyMsg
    | ExplainReplyMsg
    | CacheSummaryReplyMsg
    | PinUpdateReplyMsg
    | ControlErrorMsg
    | FatalErrorMsg
)


# ---- start-up arguments (JSON on the scheduler's command line) -----------------------------


class SchedulerArgsMsg(msgspec.Struct):
    model: ModelConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    in_addr: str  # the scheduler PULLs requests here
    out_addr: str  # the scheduler PUSHes outputs here
    parent_pid: int  # the scheduler exits when this process goes
    log_level: str = "info"
    heartbeat_path: str = ""  # the loop's heartbeat file (scheduler/heartbeat.py); "": none


def finish_to_msg(reason: FinishReason | None) -> FinishMsg | None:
    if reason is None:
        return None
    return FinishMsg(reason.kind.value, reason.matched, reason.message, reason.status_code)


def finish_from_msg(msg: FinishMsg | None) -> FinishReason | None:
    if msg is None:
        return None
    return FinishReason(FinishKind(msg.type), msg.matched, msg.message, msg.status_code)
