"""Frozen configuration, one dataclass per layer; the CLI and Engine take defaults from here.

Each dataclass lives in the module of its layer; this package names them all, so callers import
from `radixrt.core.config`."""

from __future__ import annotations

import dataclasses
from typing import Any

from radixrt.core.config.browser import BrowserConfig
from radixrt.core.config.cache import CacheConfig, KVEventsConfig
from radixrt.core.config.choices import (
    CPU_KERNEL_MODES,
    DEVICES,
    DTYPES,
    GRAMMAR_BACKEND_NAMES,
    KV_CACHE_DTYPES,
    LOG_LEVELS,
    QUANTIZATIONS,
    REASONING_PARSERS,
    SCHEDULE_POLICIES,
    TOOL_CALL_FORMATS,
)
from radixrt.core.config.model import ModelConfig
from radixrt.core.config.router import RouterConfig, RouterServerConfig
from radixrt.core.config.scheduler import SchedulerConfig
from radixrt.core.config.server import ServerConfig

__all__ = [
    "BrowserConfig",
    "CPU_KERNEL_MODES",
    "DEVICES",
    "DTYPES",
    "KV_CACHE_DTYPES",
    "ENGINE_CONFIGS",
    "GRAMMAR_BACKEND_NAMES",
    "TOOL_CALL_FORMATS",
    "REASONING_PARSERS",
    "LOG_LEVELS",
    "QUANTIZATIONS",
    "SCHEDULE_POLICIES",
    "CacheConfig",
    "KVEventsConfig",
    "ModelConfig",
    "RouterConfig",
    "RouterServerConfig",
    "SchedulerConfig",
    "ServerConfig",
    "split_kwargs",
]

ENGINE_CONFIGS = (ModelConfig, CacheConfig, SchedulerConfig)


def split_kwargs(kwargs: dict[str, Any]) -> tuple[ModelConfig, CacheConfig, SchedulerConfig]:
    """Route flat snake_case keyword arguments to the config owning each; TypeError if unknown."""
    buckets: list[dict[str, Any]] = [{} for _ in ENGINE_CONFIGS]
    owners = {f.name: i for i, c in enumerate(ENGINE_CONFIGS) for f in dataclasses.fields(c)}
    for key, value in kwargs.items():
        if key not in owners:
            raise TypeError(f"unknown engine option {key!r}; known: {sorted(owners)}")
        buckets[owners[key]][key] = value
    model, cache, sched = (c(**b) for c, b in zip(ENGINE_CONFIGS, buckets))
    return model, cache, sched  # type: ignore[return-value]
