"""Frozen configuration, one dataclass per layer; the CLI and Engine take defaults from here."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
# radixrt/cpu/guard.py: auto times each C kernel against torch once per machine, keeps the faster.
CPU_KERNEL_MODES = ("auto", "on", "off")
# Weight-only quantization at load, from float checkpoints (CPU kernels; radixrt/cpu/layers.py).
QUANTIZATIONS = ("int8",)
SCHEDULE_POLICIES = ("lpm", "dfs-weight", "fcfs", "random")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# The names radixrt.grammar's registry knows (a test keeps the two equal); the first is the
# default.
GRAMMAR_BACKEND_NAMES = ("auto", "llguidance", "outlines")


@dataclass(frozen=True)
class ModelConfig:
    """Which model, on which device, in which dtype."""

    model_path: str | None = None  # None: the bundled SmolLM2-135M-Instruct
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    device: str = "auto"  # auto: cuda when available
    context_length: int | None = None  # None: the model's max_position_embeddings
    attention_backend: str | None = None  # None: the best available for the device
    tp_size: int = 1
    nnodes: int = 1  # hosts that share the tp_size ranks, tp_size / nnodes each
    node_rank: int = 0  # this host's index; node 0 holds rank 0 and the HTTP server
    dist_init_addr: str | None = None  # host:port where the ranks meet; None: 127.0.0.1, any port
    # The secret every node shares (a path, so the secret stays out of argv and server info);
    # None: $RADIXRT_DIST_SECRET, else (one node only) a fresh one.
    dist_secret_file: str | None = None
    disable_cuda_graph: bool = False  # CUDA graphs replay decode steps (flashinfer, triton on CUDA)
    cuda_graph_max_bs: int = 64  # largest decode batch captured; bigger batches run eagerly
    cpu_kernels: str = "auto"  # float32 on CPU: radixrt's C kernels (auto: where faster than torch)
    quantization: str | None = (
        None  # int8: weight-only int8 linear layers (CPU), from float weights
    )

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError(f"context_length must be >= 2, got {self.context_length}")
        if self.tp_size < 1:
            raise ValueError(f"tp_size must be >= 1, got {self.tp_size}")
        if self.nnodes < 1 or self.tp_size % self.nnodes:
            raise ValueError(f"nnodes must divide tp_size {self.tp_size}, got {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank must be in [0, nnodes), got {self.node_rank}")
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("nnodes > 1 needs dist_init_addr (host:port of node 0)")
        if self.dist_secret_file == "":
            raise ValueError("dist_secret_file must not be empty")
        if (
            self.nnodes > 1
            and self.dist_secret_file is None
            and not os.environ.get("RADIXRT_DIST_SECRET")
        ):
            raise ValueError(
                "nnodes > 1 needs the same secret on every node: set "
                "$RADIXRT_DIST_SECRET or --dist-secret-file"
            )
        if self.cpu_kernels not in CPU_KERNEL_MODES:
            raise ValueError(
                f"cpu_kernels must be one of {CPU_KERNEL_MODES}, got {self.cpu_kernels!r}"
            )
        if self.quantization is not None:
            if self.quantization not in QUANTIZATIONS:
                raise ValueError(
                    f"quantization must be one of {QUANTIZATIONS}, got {self.quantization!r}"
                )
            if self.device == "cuda" or self.dtype not in ("auto", "float32"):
                raise ValueError(
                    "quantization int8 runs on radixrt's CPU kernels: it needs the CPU and "
                    f"float32 activations (device {self.device!r}, dtype {self.dtype!r})"
                )
            if self.cpu_kernels == "off":
                raise ValueError(
                    "quantization int8 runs on radixrt's CPU kernels: not with cpu_kernels='off'"
                )
        if self.cuda_graph_max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs must be >= 1, got {self.cuda_graph_max_bs}")


@dataclass(frozen=True)
class KVEventsConfig:
    """`--kv-events-config` (JSON, vLLM's keys where they exist): where the tree's block
    events go (radixrt/cache/kv_events.py). Binds 127.0.0.1 unless an endpoint says otherwise;
    with --dp N replica i adds i to both ports."""

    enable_kv_cache_events: bool = True
    publisher: str = "zmq"  # "zmq", or "null" (computed, not sent: for tests and timing)
    endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = "tcp://127.0.0.1:5558"
    topic: str = "kv-events"
    buffer_steps: int = 10_000  # batches kept for replay
    hwm: int = 100_000  # ZMQ send high-water mark (batches a slow subscriber may lag)
    block_size: int = 16  # tokens per block (a multiple of page_size)

    @classmethod
    def parse(cls, text: str) -> KVEventsConfig:
        """From JSON; ValueError naming the problem."""
        import json

        try:
            raw = json.loads(text)
        except ValueError as e:
            raise ValueError(f"kv_events_config is not JSON: {e}") from None
        if not isinstance(raw, dict):
            raise ValueError("kv_events_config must be a JSON object")
        known = {f.name: f for f in dataclasses.fields(cls)}
        for key, value in raw.items():
            if key not in known:
                raise ValueError(f"kv_events_config: unknown key {key!r} (known: {sorted(known)})")
            want = {"bool": bool, "int": int}.get(str(known[key].type), str)
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                if not (value is None and key == "replay_endpoint"):
                    raise ValueError(f"kv_events_config: {key} must be {want.__name__}")
        cfg = cls(**raw)
        if cfg.publisher not in ("zmq", "null"):
            raise ValueError(
                f"kv_events_config: publisher must be zmq or null, not {cfg.publisher!r}"
            )
        if cfg.block_size < 1 or cfg.buffer_steps < 1 or cfg.hwm < 0:
            raise ValueError("kv_events_config: block_size and buffer_steps must be >= 1, hwm >= 0")
        return cfg


@dataclass(frozen=True)
class CacheConfig:
    """KV pool size and prefix-cache behaviour."""

    max_total_tokens: int | None = None  # KV pool size in tokens; overrides the fraction
    mem_fraction_static: float | None = None  # None: 0.85 of GPU memory, 0.25 of RAM on CPU
    page_size: int = 1
    disable_radix_cache: bool = False
    # Pinned prefixes (radixrt/cache/pins.py): at most this share of the pool, and of it at
    # most this share per tenant (each pin counted at its full length).
    max_pinned_fraction: float = 0.5
    max_pinned_fraction_per_tenant: float = 0.25
    # Lower tiers for prefixes the pool evicts (radixrt/cache/tiers/): host memory (pinned on
    # CUDA; 0 = off) and a directory on disk that outlives the process (None = off), each
    # bounded in GB; blocks of tier_block_size tokens, a multiple of page_size. Prefixes of at
    # least write_through_min_tokens (and pinned ones) go to the lowest tier as they finish,
    # not only when evicted; 0: only on eviction.
    host_cache_size: float = 0.0
    cache_dir: str | None = None
    disk_cache_size: float = 10.0
    tier_block_size: int = 64
    write_through_min_tokens: int = 1024
    # JSON (KVEventsConfig): publish the tree's block events over ZMQ; None: off.
    kv_events_config: str | None = None

    @property
    def kv_events(self) -> KVEventsConfig | None:
        """The parsed --kv-events-config; None when off."""
        if self.kv_events_config is None:
            return None
        cfg = KVEventsConfig.parse(self.kv_events_config)
        return cfg if cfg.enable_kv_cache_events else None

    @property
    def tiers_enabled(self) -> bool:
        return self.host_cache_size > 0 or self.cache_dir is not None

    def __post_init__(self) -> None:
        if self.max_total_tokens is not None and self.max_total_tokens < 1:
            raise ValueError(f"max_total_tokens must be >= 1, got {self.max_total_tokens}")
        f = self.mem_fraction_static
        if f is not None and not 0 < f < 1:
            raise ValueError(f"mem_fraction_static must be in (0, 1), got {f}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        for name in ("max_pinned_fraction", "max_pinned_fraction_per_tenant"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("host_cache_size", "disk_cache_size"):
            size = getattr(self, name)
            if not (size >= 0 and size < float("inf")):
                raise ValueError(f"{name} must be a finite number of GB >= 0, got {size}")
        if self.cache_dir == "":
            raise ValueError("cache_dir must not be empty")
        if self.cache_dir is not None and self.disk_cache_size <= 0:
            raise ValueError("disk_cache_size must be > 0 GB with cache_dir")
        if self.tier_block_size < 1 or (
            self.tiers_enabled and self.tier_block_size % self.page_size
        ):
            raise ValueError(
                f"tier_block_size must be a positive multiple of page_size {self.page_size}, "
                f"got {self.tier_block_size}"
            )
        if self.write_through_min_tokens < 0:
            raise ValueError(
                f"write_through_min_tokens must be >= 0, got {self.write_through_min_tokens}"
            )
        events = self.kv_events  # ValueError on a bad config
        if events is not None and (self.disable_radix_cache or events.block_size % self.page_size):
            raise ValueError(
                "kv_events_config needs the radix cache and a block_size that is a multiple "
                f"of page_size {self.page_size}"
            )
        if self.tiers_enabled and self.disable_radix_cache:
            raise ValueError("host_cache_size and cache_dir need the radix cache (it is disabled)")


@dataclass(frozen=True)
class SchedulerConfig:
    """Batching limits and the admission policy."""

    max_running_requests: int = 64
    chunked_prefill_size: int = 2048  # max prompt tokens computed per step
    schedule_policy: str = "lpm"
    # Decode steps reserved per running request when admitting new ones.
    decode_reserve_tokens: int = 8
    # A waiting request older than this (seconds) is admitted first, whatever the policy.
    max_wait_s: float = 10.0
    random_seed: int = 0
    # Constrained decoding: the grammar backend, the compile time limit (a spec that takes
    # longer is refused), whether tokens the grammar forces skip their decode steps, and
    # whether a backend that bounds lengths masks tokens that could not finish in the budget.
    grammar_backend: str = "auto"
    grammar_timeout_s: float = 10.0
    disable_jump_forward: bool = False
    disable_grammar_budget: bool = False

    def __post_init__(self) -> None:
        if self.max_running_requests < 1:
            raise ValueError(f"max_running_requests must be >= 1, got {self.max_running_requests}")
        if self.chunked_prefill_size < 1:
            raise ValueError(f"chunked_prefill_size must be >= 1, got {self.chunked_prefill_size}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(
                f"schedule_policy must be one of {SCHEDULE_POLICIES}, got {self.schedule_policy!r}"
            )
        if self.grammar_backend not in GRAMMAR_BACKEND_NAMES:
            raise ValueError(
                f"grammar_backend must be one of {GRAMMAR_BACKEND_NAMES}, "
                f"got {self.grammar_backend!r}"
            )
        if self.grammar_timeout_s <= 0:
            raise ValueError(f"grammar_timeout_s must be > 0, got {self.grammar_timeout_s}")


@dataclass(frozen=True)
class ServerConfig:
    """The HTTP server: address, auth, admission limit, logging, metrics."""

    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None  # when set, every endpoint but /health needs the bearer token
    # Keys with tenants and roles (radixrt/web/keys.py); each tenant gets its own prefix-cache
    # namespace unless shared_prefix_cache. Re-read on SIGHUP.
    api_key_file: str | None = None
    shared_prefix_cache: bool = False
    max_requests_per_tenant: int | None = None  # in flight per tenant; more get 429
    # Prompt plus max_new_tokens of a tenant's requests in flight; more get 429.
    max_tokens_per_tenant: int | None = None
    max_queued_requests: int = 1024  # waiting (not yet running) requests; more get 503
    log_level: str = "info"
    enable_metrics: bool = False  # serve Prometheus text at /metrics
    served_model_name: str | None = None  # None: the model file or folder name
    drain_timeout_s: float = 30.0  # on SIGTERM, how long running requests may take to finish
    dp_size: int = 1  # data-parallel replicas: scheduler processes behind this one server
    # Bounds on the work one HTTP request may ask for (docs/reliability.md); each refusal is a
    # 400 or 413 naming its flag.
    max_request_bytes: int = 8 * 2**20  # request body
    max_prompts_per_request: int = 256  # prompts in one /generate or /v1/completions body
    max_chat_messages: int = 1024
    # Characters per prompt, refused before tokenizing; None: the context length times the
    # longest token's characters (no prompt longer than that can fit the context).
    max_prompt_chars: int | None = None
    max_stop_strings: int = 16  # per request
    max_stop_string_len: int = 256  # characters per stop string
    max_grammar_bytes: int = 128 * 2**10  # a regex, JSON schema or EBNF grammar, UTF-8
    max_pending_grammars: int = 64  # grammar checks queued or compiling; more get 503
    # The caching APIs (/v1/caches, Anthropic cache_control, Gemini cachedContents): the
    # shortest prefix a breakpoint pins (shorter: not pinned, no error), and a factor on
    # every TTL they are given (tests shorten time with it).
    cache_min_tokens: int = 0
    cache_ttl_scale: float = 1.0
    # One JSON line per finished request, without its text (radixrt/server/request_log.py),
    # rotated past this many MB; `radixrt cost --request-log` replays it.
    request_log: str | None = None
    request_log_max_mb: int = 100

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65536), got {self.port}")
        if self.max_queued_requests < 0:
            raise ValueError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {self.log_level!r}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty")
        if self.api_key is not None and self.api_key_file is not None:
            raise ValueError("give api_key or api_key_file, not both")
        if self.max_requests_per_tenant is not None and self.max_requests_per_tenant < 1:
            raise ValueError(
                f"max_requests_per_tenant must be >= 1, got {self.max_requests_per_tenant}"
            )
        if self.max_tokens_per_tenant is not None and self.max_tokens_per_tenant < 1:
            raise ValueError(
                f"max_tokens_per_tenant must be >= 1, got {self.max_tokens_per_tenant}"
            )
        if self.request_log == "":
            raise ValueError("request_log must not be empty")
        if self.request_log_max_mb < 1:
            raise ValueError(f"request_log_max_mb must be >= 1, got {self.request_log_max_mb}")
        if self.cache_min_tokens < 0:
            raise ValueError(f"cache_min_tokens must be >= 0, got {self.cache_min_tokens}")
        if not self.cache_ttl_scale > 0:
            raise ValueError(f"cache_ttl_scale must be > 0, got {self.cache_ttl_scale}")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s}")
        if self.dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {self.dp_size}")
        for name in (
            "max_request_bytes",
            "max_prompts_per_request",
            "max_chat_messages",
            "max_stop_strings",
            "max_stop_string_len",
            "max_grammar_bytes",
            "max_pending_grammars",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            raise ValueError(f"max_prompt_chars must be >= 1, got {self.max_prompt_chars}")


@dataclass(frozen=True)
class RouterConfig:
    """How requests are spread over replicas (`--dp`) or worker servers (the router)."""

    router_policy: str = "cache_aware"  # a name from radixrt.routing.policy.ROUTING_POLICIES
    # cache_aware follows the longest match when matched / prompt length exceeds this.
    cache_threshold: float = 0.5
    # Loads (requests in flight) are imbalanced when max - min > abs and max > rel * min;
    # cache_aware then sends to the least loaded whatever the match.
    balance_abs_threshold: int = 32
    balance_rel_threshold: float = 1.5
    max_tree_size: int = 1 << 20  # items (token ids or characters) kept per approximate tree

    def __post_init__(self) -> None:
        if not 0 <= self.cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0:
            raise ValueError(
                f"balance_abs_threshold must be >= 0, got {self.balance_abs_threshold}"
            )
        if self.balance_rel_threshold < 1:
            raise ValueError(
                f"balance_rel_threshold must be >= 1, got {self.balance_rel_threshold}"
            )
        if self.max_tree_size < 1:
            raise ValueError(f"max_tree_size must be >= 1, got {self.max_tree_size}")


@dataclass(frozen=True)
class RouterServerConfig:
    """The standalone router process: its address and how it watches its workers."""

    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None  # required from clients; also sent to the workers
    # Keys with tenants and roles (radixrt/web/keys.py), as the workers' --api-key-file: the
    # router checks them, keeps each tenant's prompts apart in its routing trees and passes
    # the client's key on. Without it, different client keys are kept apart the same way.
    api_key_file: str | None = None
    shared_prefix_cache: bool = False  # one routing namespace for every tenant and key
    log_level: str = "info"
    health_check_interval_s: float = 2.0
    health_failure_threshold: int = 2  # failed checks in a row that take a worker out
    request_timeout_s: float = 600.0  # per forwarded request, from send to last byte

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65536), got {self.port}")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {self.log_level!r}")
        if self.health_check_interval_s <= 0:
            raise ValueError(
                f"health_check_interval_s must be > 0, got {self.health_check_interval_s}"
            )
        if self.health_failure_threshold < 1:
            raise ValueError(
                f"health_failure_threshold must be >= 1, got {self.health_failure_threshold}"
            )
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.api_key is not None and self.api_key_file is not None:
            raise ValueError("give api_key or api_key_file, not both")


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
