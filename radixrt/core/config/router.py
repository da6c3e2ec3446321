"""RouterConfig (how requests spread over replicas or workers) and RouterServerConfig (the
standalone router process)."""

from __future__ import annotations

from dataclasses import dataclass

from radixrt.core.config.browser import BrowserConfig
from radixrt.core.config.choices import LOG_LEVELS
from radixrt.core.config.server import ServerConfig


@dataclass(frozen=True)
class RouterConfig:
    """How requests are spread over replicas (`--dp`) or worker servers (the router)."""

    router_policy: str = (
        "cache_aware"  # a name from radixrt.serve.placement.policy.ROUTING_POLICIES
    )
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
class RouterServerConfig(BrowserConfig):
    """The standalone router process: its address and how it watches its workers."""

    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None  # required from clients; also sent to the workers
    # Keys with tenants and roles (radixrt/serve/web/keys.py), as the workers' --api-key-file: the
    # router checks them, keeps each tenant's prompts apart in its routing trees and passes
    # the client's key on. Without it, different client keys are kept apart the same way.
    api_key_file: str | None = None
    # The workers' --service-key-file: every call to a worker carries it, forwarded ones with
    # the client's tenant and role (radixrt/serve/web/keys.py). Required with api_key_file.
    service_key_file: str | None = None
    shared_prefix_cache: bool = False  # one routing namespace for every tenant and key
    max_request_bytes: int = ServerConfig.max_request_bytes  # larger bodies get 413
    log_level: str = "info"
    health_check_interval_s: float = 2.0
    health_failure_threshold: int = 2  # failed checks in a row that take a worker out
    request_timeout_s: float = 600.0  # per forwarded request, from send to last byte
    # Follow the workers' KV events (their --kv-events-config, read from /get_server_info)
    # and route cache_aware on the blocks they really hold (radixrt/serve/router/kv_feed.py).
    kv_events: bool = False
    # The workers' model folder, to tokenize prompts as they do with --kv-events; None: the
    # first worker's model_path from /get_model_info (the router on the same machine).
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1, got {self.max_request_bytes}")
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
        if self.api_key_file is not None and self.service_key_file is None:
            raise ValueError(
                "api_key_file needs service_key_file: the workers must take each request's "
                "tenant from the router, and only with a service key they also hold "
                "(--service-key-file on the router and on every worker; docs/reliability.md)"
            )
        if self.service_key_file is not None and self.api_key is None and self.api_key_file is None:
            raise ValueError(
                "service_key_file needs api_key or api_key_file: without keys of its own the "
                "router would lend the workers' service key to anyone who reaches it"
            )
