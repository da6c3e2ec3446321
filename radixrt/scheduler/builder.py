"""Assemble a Scheduler from the configs: model runner, tokenizer, prefix cache, glue."""

from __future__ import annotations

from typing import Any

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.pins import BasePinTable, NoPinTable, PinTable
from radixrt.cache.prefix_cache import BasePrefixCache, NoPrefixCache
from radixrt.cache.radix_cache import RadixCache
from radixrt.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.executor.model_runner import ModelRunner
from radixrt.grammar.compiler import make_grammar_compiler
from radixrt.models.loader import eos_token_ids, load_tokenizer
from radixrt.scheduler.finish import FinishChecker
from radixrt.scheduler.grammar_queue import GrammarQueue
from radixrt.scheduler.scheduler import Scheduler


def build_scheduler(
    model_config: ModelConfig, cache_config: CacheConfig, scheduler_config: SchedulerConfig
) -> tuple[Scheduler, Any]:
    """Load the model and build what a scheduler loop needs; returns (scheduler, tokenizer)."""
    runner = ModelRunner(model_config, cache_config, scheduler_config.max_running_requests)
    tokenizer = load_tokenizer(runner.model_path)
    return assemble_scheduler(runner, cache_config, scheduler_config, tokenizer), tokenizer


def assemble_scheduler(
    runner: ModelRunner,
    cache_config: CacheConfig,
    scheduler_config: SchedulerConfig,
    tokenizer: Any | None = None,
) -> Scheduler:
    """The prefix cache, KV manager, finish checker and grammar queue around a built runner.
    Without a tokenizer (a model given in memory): no stop strings, no EOS, no grammars."""
    cache_cls: type[BasePrefixCache] = (
        NoPrefixCache if cache_config.disable_radix_cache else RadixCache
    )
    cache = cache_cls(runner.allocator, page_size=cache_config.page_size)
    kv = KVCacheManager(runner.allocator, runner.req_to_token_pool, cache)
    pins: BasePinTable = NoPinTable()
    if not cache_config.disable_radix_cache:
        capacity = runner.allocator.capacity
        pins = PinTable(
            cache,
            int(capacity * cache_config.max_pinned_fraction),
            int(capacity * cache_config.max_pinned_fraction_per_tenant),
        )
    if tokenizer is None:
        finish = FinishChecker([], lambda ids: "")
        return Scheduler(runner, kv, finish, scheduler_config, pins=pins)
    eos = eos_token_ids(runner.model_path, tokenizer)
    finish = FinishChecker(eos, lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
    grammar = GrammarQueue(
        make_grammar_compiler(scheduler_config, tokenizer, runner.arch.vocab_size, eos),
        runner.arch.vocab_size,
        jump_forward=not scheduler_config.disable_jump_forward,
        budget=not scheduler_config.disable_grammar_budget,
    )
    return Scheduler(runner, kv, finish, scheduler_config, grammar, pins)
