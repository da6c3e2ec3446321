"""CacheConfig (the KV pool, the prefix cache, its lower tiers) and KVEventsConfig (where
the tree's block events go)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from radixrt.core.config.choices import KV_CACHE_DTYPES


@dataclass(frozen=True)
class KVEventsConfig:
    """`--kv-events-config` (JSON, vLLM's keys where they exist): where the tree's block
    events go (radixrt/cache/kv_events.py). Binds 127.0.0.1 unless an endpoint says otherwise;
    with --dp N replica i moves both ports (`endpoints_for`)."""

    enable_kv_cache_events: bool = True
    publisher: str = "zmq"  # "zmq", or "null" (computed, not sent: for tests and timing)
    endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = "tcp://127.0.0.1:5558"
    topic: str = "kv-events"
    buffer_steps: int = 10_000  # batches kept for replay
    # ZMQ send high-water mark: batches queued for each subscriber that does not read; past
    # it that subscriber's batches are dropped (it sees the gap and replays).
    hwm: int = 1000
    block_size: int = 16  # tokens per block (a multiple of page_size)
    # BlockStored events carry their blocks' token ids; False: hashes only (routers need
    # only those). Servers with tenants need False, or ipc endpoints in a private folder.
    token_ids: bool = True

    def endpoints_for(self, rank: int) -> tuple[str, str | None]:
        """Replica `rank`'s (pub, replay) endpoints with `--dp`: both ports move by rank x
        (1 + the distance between them), so no replica's port lands on another's."""
        if not rank:
            return self.endpoint, self.replay_endpoint
        stride = 1
        if self.replay_endpoint and _is_tcp(self.replay_endpoint) and _is_tcp(self.endpoint):
            stride += abs(_port(self.replay_endpoint) - _port(self.endpoint))
        replay = self.replay_endpoint and _moved(self.replay_endpoint, rank * stride)
        return _moved(self.endpoint, rank * stride), replay

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
        for name in ("endpoint", "replay_endpoint"):
            value = getattr(cfg, name)
            if value is not None and not (_is_tcp(value) or value.startswith("ipc://")):
                raise ValueError(
                    f"kv_events_config: {name} must be tcp://HOST:PORT or ipc://PATH, not {value!r}"
                )
        return cfg


def private_ipc(endpoint: str | None) -> bool:
    """`endpoint` is None or an ipc:// path whose folder only this user can open."""
    if endpoint is None:
        return True
    if not endpoint.startswith("ipc://"):
        return False
    import os

    folder = os.path.dirname(os.path.abspath(endpoint.removeprefix("ipc://")))
    try:
        st = os.stat(folder)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


def _is_tcp(endpoint: str) -> bool:
    return endpoint.startswith("tcp://") and endpoint.rpartition(":")[2].isdigit()


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


def _moved(endpoint: str, offset: int) -> str:
    """A tcp endpoint's port plus `offset`; an ipc path with `.offset` appended."""
    if not _is_tcp(endpoint):
        return f"{endpoint}.{offset}"
    head, _, port = endpoint.rpartition(":")
    return f"{head}:{int(port) + offset}"


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
    # On a clean stop (SIGTERM, the server's shutdown, Engine.shutdown), how long the disk
    # tier may take to write the blocks still queued; the rest are dropped (and logged).
    disk_drain_timeout_s: float = 10.0
    # JSON (KVEventsConfig): publish the tree's block events over ZMQ; None: off.
    kv_events_config: str | None = None
    # Models with sliding-window layers: their K/V goes to a pool of this many slots per slot
    # of the full pool (cache/window_base.py); 1: one pool for every layer; None: 0.5 when the
    # pool is sized from memory, 1 with max_total_tokens. Below 1 a request longer than the
    # window takes less memory, one shorter than it no less (it needs a window slot a token).
    window_kv_fraction: float | None = None
    # The pool's element type (cache/kv_dtype.py): auto = the activations' dtype, or on the
    # CPU's kernels bfloat16 where extends run on AMX tiles (model/cpu/runtime.py); bfloat16
    # on the CPU halves a token's bytes (twice the tokens, and prefix, per GiB), compute
    # staying float32 (K/V rounded once as they are stored, widened as they are read);
    # fp8_e4m3/fp8_e5m2 on the CPU: a byte per element plus a float32 scale per (token, KV
    # head), 2 x layers x KV heads x (head dim + 4) bytes a token.
    kv_cache_dtype: str = "auto"

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
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}"
            )
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
        drain = self.disk_drain_timeout_s
        if not 0 <= drain < float("inf"):
            raise ValueError(f"disk_drain_timeout_s must be a finite number >= 0, got {drain}")
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
        w = self.window_kv_fraction
        if w is not None and not 0 < w <= 1:
            raise ValueError(f"window_kv_fraction must be in (0, 1], got {w}")
        if self.tiers_enabled and self.disable_radix_cache:
            raise ValueError("host_cache_size and cache_dir need the radix cache (it is disabled)")
