"""Assemble a Scheduler from the configs: model runner, tokenizer, prefix cache, glue."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from radixrt.cache.explain import EvictionLog
from radixrt.cache.kv_dtype import kv_dtype_name
from radixrt.cache.kv_events import BaseKVEvents, EventSender, KVEvents, NoKVEvents, NullSender
from radixrt.cache.kv_events_zmq import ZmqEventPublisher
from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.pins import BasePinTable, NoPinTable, PinTable
from radixrt.cache.prefix_cache import BasePrefixCache, NoPrefixCache
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.tiers.base import BaseKVTier
from radixrt.cache.tiers.contract import BaseKVTiers, NoKVTiers
from radixrt.cache.tiers.disk import DiskTier
from radixrt.cache.tiers.disk_format import BlockSpec
from radixrt.cache.tiers.disk_layout import note_other_widths, record_layout
from radixrt.cache.tiers.hierarchy import KVTiers
from radixrt.cache.tiers.host import HostTier
from radixrt.cache.tiers.spill import SpillToTiers
from radixrt.cache.tiers.write_through import WriteThrough
from radixrt.cache.tree_observer import HitCounter
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.executor.draft_runner import DraftRunner, draft_kv_beside
from radixrt.executor.kv_memory import NOTHING_BESIDE
from radixrt.executor.model_runner import ModelRunner
from radixrt.grammar.compiler import make_grammar_compiler
from radixrt.model.families.fingerprint import model_fingerprint
from radixrt.model.families.loader import eos_token_ids, load_tokenizer, resolve_model_path
from radixrt.scheduler.grammar_queue import GrammarQueue
from radixrt.scheduler.scheduler import Scheduler
from radixrt.scheduler.speculative import BaseDrafter, TokenTexts
from radixrt.scheduler.speculative.draft_model import DraftModelDrafter
from radixrt.scheduler.stop_check import FinishChecker

logger = logging.getLogger("radixrt")


def build_scheduler(
    model_config: ModelConfig, cache_config: CacheConfig, scheduler_config: SchedulerConfig
) -> tuple[Scheduler, Any]:
    """Load the model and build what a scheduler loop needs; returns (scheduler, tokenizer)."""
    beside = NOTHING_BESIDE
    if scheduler_config.speculative_draft_model is not None:  # its K/V and weights: same budget
        beside = draft_kv_beside(scheduler_config.speculative_draft_model)
    # The tokenizer loads on a thread of its own while the model does (about a second of a
    # start-up); the model's folder is resolved (a GGUF converted) first, once.
    folder = resolve_model_path(model_config.model_path)
    with ThreadPoolExecutor(1, thread_name_prefix="tokenizer-load") as pool:
        loading = pool.submit(load_tokenizer, folder)
        runner = ModelRunner(model_config, cache_config, scheduler_config.max_running_requests,
                             kv_beside=beside)  # fmt: skip
        tokenizer = loading.result()
    return assemble_scheduler(runner, cache_config, scheduler_config, tokenizer), tokenizer


def assemble_scheduler(
    runner: ModelRunner,
    cache_config: CacheConfig,
    scheduler_config: SchedulerConfig,
    tokenizer: Any | None = None,
) -> Scheduler:
    """The prefix cache, KV manager, finish checker and grammar queue around a built runner.
    Without a tokenizer (a model given in memory): no stop strings, no EOS, no grammars."""
    tiers = build_tiers(runner, cache_config)
    events = build_events(runner, cache_config)
    evictions = EvictionLog()  # the scheduler's, read by explain; observes the tree
    cache: BasePrefixCache = NoPrefixCache(runner.allocator, page_size=cache_config.page_size)
    pins: BasePinTable = NoPinTable()
    if not cache_config.disable_radix_cache:
        tree = RadixCache(runner.allocator, cache_config.page_size)
        observe_tree(tree, evictions, tiers, events)
        capacity = runner.allocator.capacity
        pins = PinTable(
            tree,
            int(capacity * cache_config.max_pinned_fraction),
            int(capacity * cache_config.max_pinned_fraction_per_tenant),
        )
        cache = tree
    kv = KVCacheManager(runner.allocator, runner.req_to_token_pool, cache, tiers)
    drafter = build_draft_model(runner, scheduler_config)
    if tokenizer is None:
        finish = FinishChecker([], lambda ids: "")
        return Scheduler(runner, kv, finish, scheduler_config, pins=pins, events=events,
                         evictions=evictions, drafter=drafter)  # fmt: skip
    eos = eos_token_ids(runner.model_path, tokenizer)
    finish = FinishChecker(eos, lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
    grammar = GrammarQueue(
        make_grammar_compiler(scheduler_config, tokenizer, runner.arch.vocab_size, eos),
        runner.arch.vocab_size,
        jump_forward=not scheduler_config.disable_jump_forward,
        budget=not scheduler_config.disable_grammar_budget,
        stop_ids=tuple(eos),
    )
    # Token texts for lookup drafts keyed on the prompt's words (speculative/keyed.py).
    texts = TokenTexts(tokenizer.decode, lambda s: tokenizer.encode(s, add_special_tokens=False))
    return Scheduler(runner, kv, finish, scheduler_config, grammar, pins, events, evictions,
                     drafter, texts)  # fmt: skip


def build_draft_model(runner: ModelRunner, config: SchedulerConfig) -> BaseDrafter | None:
    """--speculative-draft-model's drafter over `runner`'s slots (None: not configured);
    ValueError for a model or setup it cannot draft for."""
    if config.speculative_draft_model is None:
        return None
    draft = DraftRunner(config.speculative_draft_model, runner, config.max_running_requests,
                        config.speculative_num_draft_tokens)  # fmt: skip
    return DraftModelDrafter(draft, runner.req_to_token_pool.req_to_token)


def observe_tree(
    cache: BasePrefixCache, evictions: EvictionLog, tiers: BaseKVTiers, events: BaseKVEvents
) -> None:
    """Add the tree's observers, in the order they are told: the eviction log and hit counts
    (both the dashboard's), the spill into and write-through to lower tiers, then the KV
    events. A part that is off (no tiers, events off) adds no observer. The builder owns them
    from here on: the KV manager shares `tiers` (to load from), the scheduler `events`
    (publish) and `evictions` (explain)."""
    cache.observers.add(evictions)
    cache.observers.add(HitCounter())
    if tiers.names:
        cache.observers.add(SpillToTiers(tiers))
        cache.observers.add(WriteThrough(tiers))
    if not isinstance(events, NoKVEvents):
        cache.observers.add(events)


def build_events(runner: ModelRunner, cache_config: CacheConfig) -> BaseKVEvents:
    """The tree's block events as --kv-events-config says (NoKVEvents: off). With --dp the
    replica's index (RADIXRT_DP_RANK) moves the ports and is sent with each batch."""
    config = cache_config.kv_events
    if config is None:
        return NoKVEvents()
    rank = int(os.environ.get("RADIXRT_DP_RANK", "0"))
    sender: EventSender = (
        ZmqEventPublisher(config, rank=rank) if config.publisher == "zmq" else NullSender()
    )
    medium = "GPU" if runner.allocator.device.type == "cuda" else "CPU"
    dp_rank = rank if "RADIXRT_DP_RANK" in os.environ else None
    return KVEvents(sender, config.block_size, medium, dp_rank=dp_rank, token_ids=config.token_ids)


def build_tiers(runner: ModelRunner, cache_config: CacheConfig) -> BaseKVTiers:
    """The host and disk tiers below the runner's KV pool, as configured (NoKVTiers: none)."""
    if not cache_config.tiers_enabled:
        return NoKVTiers()
    if runner.model_config.tp_size > 1:
        raise ValueError(
            "--host-cache-size and --cache-dir need --tp 1: with tensor parallelism each rank "
            "holds a share of the KV heads, which the tiers do not gather yet"
        )
    pool = runner.token_to_kv_pool
    block = cache_config.tier_block_size
    shape = (pool.num_layers, 2, block, pool.num_kv_heads, pool.row_width)
    in_memory = not (runner.model_path / "config.json").is_file()
    given = runner.model if in_memory else None
    fingerprint = model_fingerprint(runner.model_path, given, pool.dtype, runner.weight_form, shape)
    tiers: list[BaseKVTier] = []
    if cache_config.host_cache_size > 0:
        size = int(cache_config.host_cache_size * 1e9)
        tiers.append(HostTier(shape, pool.dtype, size, pin_memory=pool.device.type == "cuda"))
    if cache_config.cache_dir is not None:
        spec = BlockSpec(fingerprint, block, pool.dtype, shape)
        size = int(cache_config.disk_cache_size * 1e9)
        try:
            drain_s = cache_config.disk_drain_timeout_s
            disk = DiskTier(cache_config.cache_dir, spec, size, drain_s)
        except (OSError, ValueError) as e:  # not ours, open to others, a bad key file
            raise ValueError(f"--cache-dir {cache_config.cache_dir!r} is not usable: {e}") from e
        tiers.append(disk)
        # the model and weights alone, whatever the KV width: to name blocks of another width
        key = model_fingerprint(runner.model_path, given, runner.dtype, runner.weight_form,
                                shape[:4])  # fmt: skip
        kv_name = kv_dtype_name(pool.dtype)
        record_layout(disk.root, key, kv_name, shape)
        note_other_widths(disk.root.parent, disk.root, key, kv_name)
    logger.info("KV tiers below the pool: %s (blocks of %d tokens, %.1f MB each; model %s)",
                ", ".join(f"{t.name} {t.capacity_bytes / 1e9:g} GB" for t in tiers), block,
                tiers[0].block_bytes / 1e6, fingerprint[:16])  # fmt: skip
    return KVTiers(pool, tiers, block, fingerprint, cache_config.write_through_min_tokens)
