"""DataParallelManager: the TokenizerManager interface over `--dp N` replicas.

Each replica is one scheduler process (own model copy, KV pool and radix tree) with its own
TokenizerManager and ZMQ sockets. `submit` asks the routing policy (`radixrt/serve/placement/`)
which replica gets an HTTP request (all its prompts and samples go to the same one); aborts, cache
flushes, info and cache-summary queries fan out to every replica, and their answers are merged.
Any replica dying takes the server down, as a lone scheduler dying does.
"""

from __future__ import annotations

import asyncio
import os
from collections import ChainMap
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from radixrt.core import PinSpec, SamplingParams
from radixrt.core.messages import (
    CacheSummaryReplyMsg,
    InfoReplyMsg,
    MissMsg,
    SubtreeMsg,
    TierInfoMsg,
)
from radixrt.core.step_times import merge_step_times
from radixrt.serve.http.args import ServerArgs
from radixrt.serve.http.tokenizer_manager import ReqState, TokenizerManager
from radixrt.serve.placement.policy import BaseRoutingPolicy, RouteRequest, WorkerLoad

T = TypeVar("T")
# Misses a merged summary keeps: as many as one replica's log (scheduler/misses.py LOG_SIZE;
# not imported, so that the HTTP process does not load torch).
MAX_MISSES = 16


class DPInfoReplyMsg(InfoReplyMsg, tag=True):
    """Totals over the replicas (the hit rate is total cached / total prompt tokens), plus
    each replica's own figures and routing count under `replicas`."""

    router_policy: str = ""
    replicas: list[dict[str, Any]] = []


class DataParallelManager:
    """Routes each submitted request to one replica's TokenizerManager."""

    def __init__(self, managers: list[TokenizerManager], policy: BaseRoutingPolicy) -> None:
        self.managers = managers
        self.policy = policy
        first = managers[0]
        self.tokenizer = first.tokenizer
        self.ready = first.ready  # per-replica limits: a prompt must fit one replica's pool
        self.config = first.config
        self.metrics = first.metrics  # shared by every replica's manager
        self.routed = [0] * len(managers)  # HTTP requests sent to each replica
        self._ids = [f"dp{i}" for i in range(len(managers))]

    @property
    def states(self) -> ChainMap[str, ReqState]:
        """Every request in flight, over all replicas (read-only view)."""
        return ChainMap(*(m.states for m in self.managers))

    @property
    def dead_reason(self) -> str | None:
        return next((m.dead_reason for m in self.managers if m.dead_reason is not None), None)

    @property
    def stall_reason(self) -> str | None:
        """The first wedged replica's reason (its requests fail; the others serve on)."""
        return next((r for m in self.managers if (r := m.stall_reason) is not None), None)

    @property
    def num_queued(self) -> int:
        return sum(m.num_queued for m in self.managers)

    def start(self, on_dead: Callable[[str], None]) -> None:
        for m in self.managers:
            m.start(on_dead)

    async def close(self) -> None:
        await asyncio.gather(*(m.close() for m in self.managers))

    def submit(
        self,
        prompts: list[list[int]],
        params: list[SamplingParams],
        rids: list[str] | None,
        extra_key: str | None = None,
        session: str | None = None,
        caller: str = "",
        pins: list[PinSpec] | None = None,
        endpoint: str = "",
    ) -> list[ReqState]:
        """Pick a replica by the first prompt (and `session`) and submit the lot there."""
        for rid in rids or ():
            if any((caller, rid) in m.groups for m in self.managers):
                raise ValueError(f"rid {rid!r} is already in use")
        key: tuple[Any, ...] = tuple(prompts[0]) if prompts else ()
        if extra_key is not None:  # another cache namespace: never matches the plain prompts
            key = (extra_key, *key)  # ... nor another's session (a tenant's, a salt's)
            session = f"{extra_key}\x1f{session}" if session is not None else None
        loads = [WorkerLoad(wid, len(m.states)) for wid, m in zip(self._ids, self.managers)]
        idx = self.policy.select(RouteRequest(key, session), loads)
        states = self.managers[idx].submit(
            prompts, params, rids, extra_key, caller=caller, pins=pins, endpoint=endpoint
        )
        self.routed[idx] += 1
        return states

    def abort(self, states: list[ReqState]) -> None:
        for m in self.managers:  # each drops only the states it holds
            m.abort(states)

    def abort_rid(self, rid: str, caller: str = "") -> None:
        for m in self.managers:
            m.abort_rid(rid, caller)

    async def update_pin(self, pin_id: str, expire_at: float | None) -> bool:
        """On every replica (a pin lives where its prefix ran)."""
        found = await asyncio.gather(*(m.update_pin(pin_id, expire_at) for m in self.managers))
        return any(found)

    async def explain_cache(
        self, input_ids: list[int], extra_key: str | None, own_prefix: str | None
    ) -> Any:
        """The replica whose cache holds the most of the prompt explains it."""
        replies = await asyncio.gather(
            *(m.explain_cache(input_ids, extra_key, own_prefix) for m in self.managers)
        )
        return max(replies, key=lambda r: r.matched_tokens)

    async def cache_summary(self, max_rows: int = 20) -> CacheSummaryReplyMsg:
        """Every replica's, merged (`merge_summaries`)."""
        replies = await asyncio.gather(*(m.cache_summary(max_rows) for m in self.managers))
        return merge_summaries(list(replies), self._ids, max_rows)

    def num_in_flight(self, caller: str) -> int:
        return sum(m.num_in_flight(caller) for m in self.managers)

    def tokens_in_flight(self, caller: str) -> int:
        return sum(m.tokens_in_flight(caller) for m in self.managers)

    async def run_tokenizer(self, fn: Callable[..., T], *args: Any, caller: str = "") -> T:
        return await self.managers[0].run_tokenizer(fn, *args, caller=caller)

    def abort_all(self) -> None:
        for m in self.managers:
            m.abort_all()

    async def flush_cache(self, disk: bool = False) -> list[str] | None:
        """Every replica's cache; None when one of them was busy (the others are flushed)."""
        replies = await asyncio.gather(*(m.flush_cache(disk) for m in self.managers))
        if any(r is None for r in replies):
            return None
        return list(dict.fromkeys(t for r in replies if r is not None for t in r))

    async def get_info(self) -> DPInfoReplyMsg:
        infos = await asyncio.gather(*(m.get_info() for m in self.managers))
        totals: dict[str, Any] = {}
        for name in InfoReplyMsg.__struct_fields__:
            if name not in ("reply_id", "cache_hit_rate", "tiers", "step_times"):
                totals[name] = sum(getattr(i, name) for i in infos)
        totals["tiers"] = merge_tiers([i.tiers for i in infos])
        totals["step_times"] = merge_step_times([i.step_times for i in infos])
        prompt = totals["prompt_tokens"]
        replicas = []
        for wid, info, routed in zip(self._ids, infos, self.routed):
            d = msgspec.structs.asdict(info)
            d.pop("reply_id")
            replicas.append({"replica": wid, "routed_requests": routed, **d})
        return DPInfoReplyMsg(
            reply_id=0,
            cache_hit_rate=totals["cached_tokens"] / prompt if prompt else 0.0,
            router_policy=self.policy.name,
            replicas=replicas,
            **totals,
        )


def merge_tiers(per_replica: list[list[TierInfoMsg]]) -> list[TierInfoMsg]:
    """One figure per tier over the replicas: counters and host sizes summed; the disk tier's
    blocks, bytes and capacity are the largest replica's view (replicas share a --cache-dir,
    so summing would count each file once per replica)."""
    out: dict[str, TierInfoMsg] = {}
    for tiers in per_replica:
        for t in tiers:
            have = out.get(t.name)
            if have is None:
                out[t.name] = t
                continue
            merged = {f: getattr(have, f) + getattr(t, f) for f in TierInfoMsg.__struct_fields__
                      if f != "name"}  # fmt: skip
            if t.name == "disk":
                for f in ("blocks", "tokens", "bytes", "capacity_bytes"):
                    merged[f] = max(getattr(have, f), getattr(t, f))
            out[t.name] = TierInfoMsg(name=t.name, **merged)
    return list(out.values())


def merge_summaries(
    replies: list[CacheSummaryReplyMsg], replica_ids: list[str], max_rows: int
) -> CacheSummaryReplyMsg:
    """One summary of several trees: the largest root children first over all replicas, each
    followed by its own child rows, `max_rows` in all; the newest MAX_MISSES misses first;
    counts summed.
    Every row and miss names its replica."""
    groups: list[list[SubtreeMsg]] = []  # a root child's row, then its children's
    misses: list[MissMsg] = []
    by_cause: dict[str, int] = {}
    for wid, reply in zip(replica_ids, replies, strict=True):
        for row in reply.subtrees:
            row = msgspec.structs.replace(row, replica=wid)
            if row.depth == 1 or not groups:
                groups.append([row])
            else:
                groups[-1].append(row)
        misses += [msgspec.structs.replace(m, replica=wid) for m in reply.misses]
        for cause, n in reply.misses_by_cause.items():
            by_cause[cause] = by_cause.get(cause, 0) + n
    groups.sort(key=lambda g: -g[0].tokens)
    misses.sort(key=lambda m: -m.at)
    return CacheSummaryReplyMsg(
        reply_id=0,
        num_nodes=sum(r.num_nodes for r in replies),
        walked_nodes=sum(r.walked_nodes for r in replies),
        truncated=any(r.truncated for r in replies),
        subtrees=[row for group in groups for row in group][:max_rows],
        num_misses=sum(r.num_misses for r in replies),
        misses_by_cause=by_cause,
        misses=misses[:MAX_MISSES],
    )


def replica_envs(args: ServerArgs) -> list[dict[str, str] | None]:
    """Environment of each replica's scheduler process (None: inherit this one's).

    With `--dp N` on CPU each replica gets `cpu_count // N` torch threads (unless
    OMP_NUM_THREADS is set); on CUDA replica i sees GPUs [i * tp, (i + 1) * tp) of those
    visible. ValueError when fewer GPUs are visible than N * tp.
    """
    dp, tp = args.server.dp_size, args.model.tp_size
    if dp == 1:
        return [None]
    gpus = [] if args.model.device == "cpu" else _visible_gpus()
    if args.model.device == "cuda" or gpus:
        if len(gpus) < dp * tp:
            raise ValueError(f"--dp {dp} with --tp {tp} needs {dp * tp} GPUs, {len(gpus)} visible")
    envs: list[dict[str, str] | None] = []
    for rank in range(dp):
        env = dict(os.environ)
        env["RADIXRT_DP_RANK"] = str(rank)  # KV events: ports and batches name the replica
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[rank * tp : (rank + 1) * tp])
        else:
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // dp)))
        envs.append(env)
    return envs


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]
