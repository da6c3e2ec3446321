"""ServerConfig: the HTTP server's address, auth, admission limits, request bounds, logging."""

from __future__ import annotations

from dataclasses import dataclass

from radixrt.core.config.browser import BrowserConfig
from radixrt.core.config.choices import LOG_LEVELS, REASONING_PARSERS, TOOL_CALL_FORMATS


@dataclass(frozen=True)
class ServerConfig(BrowserConfig):
    """The HTTP server: address, auth, admission limit, logging, metrics."""

    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None  # when set, every endpoint but /health needs the bearer token
    # Keys with tenants and roles (radixrt/serve/web/keys.py); each tenant gets its own prefix-cache
    # namespace unless shared_prefix_cache. Re-read on SIGHUP.
    api_key_file: str | None = None
    # The key the router presents (radixrt/serve/web/keys.py): with it, and only with it, a request
    # acts for the tenant and role its x-radixrt-tenant / x-radixrt-role headers name.
    service_key_file: str | None = None
    shared_prefix_cache: bool = False
    max_requests_per_tenant: int | None = None  # in flight per tenant; more get 429
    # Prompt plus max_new_tokens of a tenant's requests in flight; more get 429.
    max_tokens_per_tenant: int | None = None
    max_queued_requests: int = 1024  # waiting (not yet running) requests; more get 503
    log_level: str = "info"
    enable_metrics: bool = False  # serve Prometheus text at /metrics
    served_model_name: str | None = None  # None: the model file or folder name
    drain_timeout_s: float = 30.0  # on SIGTERM, how long running requests may take to finish
    # The scheduler loop beats once an iteration (radixrt/scheduler/heartbeat.py); silent this
    # long, it is taken as wedged: /health answers 503, the requests and questions waiting on
    # it fail with 503, new ones are refused with 503, until it beats again. Longer than the
    # slowest step (a first CUDA step that compiles kernels counts).
    scheduler_stall_timeout_s: float = 60.0
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
    # Of those, what one tenant's requests may have started; more of its own get 429, so one
    # tenant's slow schemas leave the rest of the slots to the others.
    max_pending_grammars_per_tenant: int = 16
    tool_call_format: str = "auto"  # TOOL_CALL_FORMATS
    reasoning_parser: str = "none"  # REASONING_PARSERS
    # Logprob entries one request may ask for: tokens x (1 + top_logprobs_num), input (from
    # logprob_start_len) and output (max_new_tokens), summed over prompts x n; more get 400.
    max_logprob_entries: int = 2**20
    # The caching APIs (/v1/caches, Anthropic cache_control, Gemini cachedContents): the
    # shortest prefix a breakpoint pins (shorter: not pinned, no error), and a factor on
    # every TTL they are given (tests shorten time with it).
    cache_min_tokens: int = 0
    cache_ttl_scale: float = 1.0
    # Stored responses (/v1/responses with store: true), per tenant: past either bound the
    # oldest goes, and its pin with it.
    max_stored_responses: int = 1024
    max_stored_response_bytes: int = 64 * 2**20
    # Batches (OpenAI's /v1/batches, Anthropic's /v1/messages/batches): lines in flight at
    # once over all batches (the rest of the server's slots stay with interactive requests),
    # requests per batch, batches kept per tenant (past it the oldest ended one goes), and
    # bytes of files (/v1/files: uploads, batch outputs) per tenant, past which uploads are
    # refused. An uploaded file is a request body: --max-request-bytes bounds it.
    batch_in_flight: int = 8
    max_batch_requests: int = 50_000
    max_stored_batches: int = 1000
    max_stored_file_bytes: int = 512 * 2**20
    # One JSON line per finished request, without its text (radixrt/serve/http/request_log.py),
    # rotated past this many MB; `radixrt cost --request-log` replays it.
    request_log: str | None = None
    request_log_max_mb: int = 100
    # Cache-miss diagnostics (radixrt/serve/http/diagnostics/): fingerprints of answered chat-like
    # requests kept per tenant, hashes only; past either bound the oldest goes.
    max_fingerprints: int = 4096
    max_fingerprint_bytes: int = 16 * 2**20
    # Answered chat turns' token ids (radixrt/serve/http/continuations.py), so that a next
    # turn replaying one reads it from the cache: bytes of ids over all tenants, and turns per
    # tenant; past either the least recently used goes. Either 0: none kept.
    continuation_max_bytes: int = 64 * 2**20
    continuation_max_turns: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65536), got {self.port}")
        if self.max_queued_requests < 0:
            raise ValueError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        if self.tool_call_format not in TOOL_CALL_FORMATS:
            raise ValueError(
                f"tool_call_format must be one of {TOOL_CALL_FORMATS}, "
                f"got {self.tool_call_format!r}"
            )
        if self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"reasoning_parser must be one of {REASONING_PARSERS}, "
                f"got {self.reasoning_parser!r}"
            )
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {self.log_level!r}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty")
        if self.api_key is not None and self.api_key_file is not None:
            raise ValueError("give api_key or api_key_file, not both")
        if self.max_logprob_entries < 0:
            raise ValueError(f"max_logprob_entries must be >= 0, got {self.max_logprob_entries}")
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
        stall = self.scheduler_stall_timeout_s
        if not 0 < stall < float("inf"):
            raise ValueError(f"scheduler_stall_timeout_s must be a finite number > 0, got {stall}")
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
            "max_pending_grammars_per_tenant",
            "max_stored_responses",
            "max_stored_response_bytes",
            "batch_in_flight",
            "max_batch_requests",
            "max_stored_batches",
            "max_stored_file_bytes",
            "max_fingerprints",
            "max_fingerprint_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("continuation_max_bytes", "continuation_max_turns"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: off), got {getattr(self, name)}")
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            raise ValueError(f"max_prompt_chars must be >= 1, got {self.max_prompt_chars}")
