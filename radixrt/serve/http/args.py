"""Command-line flags for `radixrt serve`, built from the config dataclasses' fields.

Every flag is `--field-name` of one of ModelConfig, CacheConfig, SchedulerConfig and
ServerConfig, and its default is the dataclass default, so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any, NamedTuple

from radixrt.core.config import (
    CPU_KERNEL_MODES,
    DEVICES,
    DTYPES,
    KV_CACHE_DTYPES,
    LOG_LEVELS,
    QUANTIZATIONS,
    REASONING_PARSERS,
    SCHEDULE_POLICIES,
    TOOL_CALL_FORMATS,
    CacheConfig,
    ModelConfig,
    RouterConfig,
    SchedulerConfig,
    ServerConfig,
)
from radixrt.core.config.cache import private_ipc
from radixrt.grammar import GRAMMAR_BACKENDS
from radixrt.model.attention import ATTENTION_BACKENDS
from radixrt.serve.placement.policy import ROUTING_POLICIES

SERVER_CONFIGS = (ModelConfig, CacheConfig, SchedulerConfig, ServerConfig, RouterConfig)

# Extra spellings besides --field-name: short ones, and vLLM's names for the same settings
# (`vllm serve MODEL --max-model-len ...` runs as `radixrt serve MODEL --max-model-len ...`).
_ALIASES = {
    "tp_size": ("--tp", "--tensor-parallel-size"),
    "dp_size": ("--dp", "--data-parallel-size"),
    "model_path": ("--model",),
    "context_length": ("--max-model-len",),
    "max_running_requests": ("--max-num-seqs",),
    "mem_fraction_static": ("--gpu-memory-utilization",),
    "random_seed": ("--seed",),
    "disable_cuda_graph": ("--enforce-eager",),
}
# vLLM's prefix-caching switch, the radix cache's other spelling (on by default here).
_PREFIX_CACHING = (
    ("--enable-prefix-caching", "store_false", "vLLM's spelling: the radix cache is on by default"),
    ("--no-enable-prefix-caching", "store_true", "vLLM's spelling of --disable-radix-cache"),
)
_CHOICES: dict[str, tuple[str, ...]] = {
    "dtype": DTYPES,
    "device": DEVICES,
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "cpu_kernels": CPU_KERNEL_MODES,
    "quantization": QUANTIZATIONS,
    "schedule_policy": SCHEDULE_POLICIES,
    "attention_backend": tuple(ATTENTION_BACKENDS),
    "log_level": LOG_LEVELS,
    "router_policy": tuple(ROUTING_POLICIES),
    "grammar_backend": tuple(GRAMMAR_BACKENDS),
    "tool_call_format": TOOL_CALL_FORMATS,
    "reasoning_parser": REASONING_PARSERS,
}
_HELP = {
    "model_path": "local HF folder or .gguf file; None: the bundled SmolLM2-135M-Instruct",
    "dtype": "weights and KV dtype (auto: bfloat16 on CUDA; on the CPU bfloat16 linear "
    "weights where the kernels run a vector variant (AMX, AVX-512, AVX2), else float32; CPU "
    "bfloat16 keeps activations in float32 when the kernels run)",
    "device": "auto picks cuda when available",
    "cpu_kernels": "float32 on CPU: on = radixrt's C kernels, off = torch ops, auto = each "
    "kernel timed against torch once per machine and the faster kept",
    "quantization": "int8: int8 linear layers (per-output-channel scales) quantized at load, "
    "on the CPU kernels, times float32 activations or, where the guard measures AMX-INT8/VNNI "
    "faster, activations as two int8 planes per token; w8a8: one plane (faster; "
    "perplexity about +4 percent, int8 +0.14: docs/benchmarks.md section 8)",
    "context_length": "max tokens per request; None: the model's",
    "attention_backend": "None: the best available for the device",
    "tp_size": "tensor-parallel ranks: each holds 1/tp of the heads, MLP rows and KV heads",
    "nnodes": "hosts sharing the --tp ranks (tp/nnodes each); node 0 serves HTTP",
    "node_rank": "this host's index among --nnodes",
    "dist_init_addr": "host:port of node 0 where the ranks meet; None: a free local port",
    "dist_secret_file": "file with the secret all nodes share; None: $RADIXRT_DIST_SECRET",
    "max_total_tokens": "KV pool size in tokens; overrides --mem-fraction-static",
    "mem_fraction_static": "memory fraction for weights + KV pool; None: 0.85 of GPU, 0.25 of RAM",
    "page_size": "tokens per KV page",
    "kv_cache_dtype": "KV pool element type (auto: the activations' dtype; on the CPU's "
    "kernels bfloat16 where extends run on AMX tiles with bfloat16 weights, else float32); "
    "bfloat16 on the CPU holds twice the tokens per GiB, attention still computed in "
    "float32 (K/V rounded once when stored); fp8_e4m3/fp8_e5m2 (CPU): a byte per value plus "
    "a float32 scale per token and KV head (about 3.8x float32's tokens at head dim 64)",
    "disable_radix_cache": "turn off prefix caching",
    "max_pinned_fraction": "share of the KV pool pinned prefixes (caching APIs) may hold; a pin "
    "past it is refused with the reason",
    "max_pinned_fraction_per_tenant": "share of the KV pool one tenant's pins may hold",
    "host_cache_size": "GB of host memory for KV the pool evicts (pinned on CUDA); 0: off",
    "cache_dir": "directory for KV blocks on disk, kept across restarts and shared by "
    "processes serving the same model; None: off",
    "disk_cache_size": "GB of block files in --cache-dir at most (least recently used deleted)",
    "disk_drain_timeout_s": "on a clean stop, seconds the disk tier may take to write the "
    "blocks still queued (the rest are dropped, and the counts logged)",
    "tier_block_size": "tokens per block in the host and disk tiers (a multiple of --page-size)",
    "kv_events_config": "JSON: publish the tree's block events over ZMQ as vLLM does, e.g. "
    '{"endpoint": "tcp://127.0.0.1:5557", "replay_endpoint": "tcp://127.0.0.1:5558", '
    '"block_size": 16}; None: off',
    "write_through_min_tokens": "prefixes this long (and pinned ones) are written to the lowest "
    "tier as they are cached, not only when evicted; 0: only when evicted",
    "max_running_requests": "requests decoded together at most",
    "chunked_prefill_size": "prompt tokens computed per step at most; None: 512 on CPU, "
    "2048 on CUDA",
    "schedule_policy": "order of the waiting queue",
    "allowed_hosts": "comma-separated host names the Host header may carry besides localhost, "
    "*.localhost and IP addresses (DNS rebinding: other names get 421); *.domain, or * for any",
    "allowed_origins": "comma-separated origins (https://app.example.com) whose web pages may "
    "call the API, with CORS headers; * for any; other pages get 403",
    "host": "address to bind",
    "port": "port to bind",
    "api_key": "require `Authorization: Bearer <key>` on every endpoint but /health; "
    "None: the RADIXRT_API_KEY environment variable, if set (not visible in ps)",
    "api_key_file": 'JSON {"keys": [{"key": "<secret or sha256:hex>", "tenant": "a", '
    '"role": "user|admin"}]}: tenants get separate prefix caches; re-read on SIGHUP',
    "service_key_file": "file with the router's service key (one line, 16+ characters): "
    "requests bearing it act for the tenant and role in x-radixrt-tenant / x-radixrt-role",
    "shared_prefix_cache": "with --api-key-file: one prefix cache for every tenant",
    "max_requests_per_tenant": "with --api-key-file: requests in flight per tenant; more get 429",
    "max_tokens_per_tenant": "with --api-key-file: prompt plus max_tokens of a tenant's "
    "requests in flight; more get 429",
    "max_queued_requests": "waiting requests beyond this are refused with 503",
    "log_level": "logging level",
    "enable_metrics": "serve Prometheus metrics at /metrics",
    "grammar_backend": "constrained-decoding backend (regex, json_schema, ebnf)",
    "grammar_timeout_s": "a grammar that takes longer to compile is refused with 400",
    "grammar_branch_cache_mb": "auto grammar backend: MB of compiled regex automata kept "
    "(shared by the grammars of tool lists and named calls); least recently used dropped",
    "disable_jump_forward": "decode grammar-forced tokens one step each instead of in one extend",
    "disable_grammar_budget": "let constrained outputs run out of max_new_tokens unfinished "
    "(without it, a length-bounding backend only allows tokens that can finish in time)",
    "speculative_num_draft_tokens": "speculative decoding: the most tokens drafted per request "
    "(not grammar-constrained) and step by lookup in its own prompt and output and in the prefix "
    "cache's paths, checked in the same forward pass (greedy output is the same as without, "
    "sampled output has the same distribution), or by --speculative-draft-model; fewer while "
    "drafts are rejected; 0: off",
    "speculative_ngram_max": "speculative decoding: the longest suffix n-gram looked up in the "
    "request's own tokens (shorter ones are tried down to 1)",
    "speculative_tree_branches": "speculative decoding: lookup drafts that diverge are verified "
    "as one tree of up to this many branches in the same pass (CPU attention backends, one "
    "slot per page); 1: a single chain",
    "speculative_tree_nodes": "speculative decoding: the most drafted tokens of a draft tree "
    "(0: twice --speculative-num-draft-tokens)",
    "disable_adaptive_draft_depth": "speculative decoding: verify each draft as long as it is "
    "made (up to --speculative-num-draft-tokens) instead of only the tokens likely enough to be "
    "kept to pay for their rows at the pass cost measured on this machine",
    "speculative_draft_model": "speculative decoding: draft with this smaller model (a local HF "
    "folder with the target's vocabulary) instead of by lookup; its greedy tokens are checked "
    "like lookup drafts, so outputs are as without; needs --speculative-num-draft-tokens",
    "served_model_name": "model name reported by /v1/models; None: the file or folder name",
    "drain_timeout_s": "seconds running requests may take to finish after SIGTERM",
    "scheduler_stall_timeout_s": "seconds without a heartbeat from the scheduler loop after "
    "which it is taken as wedged: /health and the requests waiting on it answer 503 until it "
    "runs again",
    "dp_size": "data-parallel replicas: scheduler processes, each with its own model and cache",
    "max_request_bytes": "request bodies larger than this are refused with 413",
    "max_prompts_per_request": "prompts in one /generate or /v1/completions request",
    "max_chat_messages": "messages in one chat request",
    "max_prompt_chars": "characters per prompt, refused before tokenizing; None: context "
    "length x the longest token's characters",
    "max_stop_strings": "stop strings per request",
    "max_stop_string_len": "characters per stop string",
    "max_grammar_bytes": "bytes of a regex, JSON schema or EBNF grammar",
    "max_pending_grammars": "grammar compiles queued or running; more are refused with 503",
    "max_pending_grammars_per_tenant": "of those, the ones one tenant's requests started; more "
    "of its own are refused with 429",
    "tool_call_format": "how the model writes tool calls (the prompt's tool list, the parser "
    "of calls, the grammar of forced calls); auto: the format its chat template shows, "
    "hermes when it shows none",
    "reasoning_parser": "read a reasoning model's thinking (<think>...</think>) out of its "
    "output, as vLLM's and SGLang's --reasoning-parser: qwen3 (where the output or the prompt "
    "opens it), deepseek_r1 (the output starts in it); chat completions give it as "
    "reasoning_content, the Responses API as a reasoning item, Anthropic's and Gemini's "
    "routes as thinking blocks or thought parts when asked for; none: it stays in the text",
    "max_logprob_entries": "logprob entries one request may ask for: tokens x (1 + top "
    "logprobs), prompt (from logprob_start_len) and output (max_new_tokens), over prompts x n; "
    "more are refused with 400",
    "cache_min_tokens": "caching APIs: shortest prefix a cache breakpoint pins (shorter ones "
    "are not pinned, without error)",
    "cache_ttl_scale": "caching APIs: factor on every TTL given (for tests)",
    "max_stored_responses": "/v1/responses with store: responses kept per tenant (past it the "
    "oldest goes, and its pin)",
    "max_stored_response_bytes": "/v1/responses with store: bytes kept per tenant (conversation "
    "text and token ids; past it the oldest goes)",
    "batch_in_flight": "batches (/v1/batches, /v1/messages/batches): lines in flight at once "
    "over all batches; the server's other slots stay with interactive requests",
    "max_batch_requests": "requests in one batch",
    "max_stored_batches": "batches kept per tenant (past it the oldest ended one goes)",
    "max_stored_file_bytes": "/v1/files: bytes of files kept per tenant (uploads and batch "
    "outputs); uploads past it are refused (each upload is bounded by --max-request-bytes)",
    "request_log": "JSONL file: one line per finished request (counts, cache markers, "
    "salted prefix hashes, no text) for `radixrt cost --request-log`",
    "request_log_max_mb": "rotate the request log past this size (FILE.1, FILE.2, FILE.3)",
    "max_fingerprints": "cache-miss diagnostics: prompt fingerprints kept per tenant (hashes "
    "only; past it the oldest goes)",
    "max_fingerprint_bytes": "cache-miss diagnostics: bytes of prompt fingerprints kept per "
    "tenant (past it the oldest goes)",
    "continuation_max_bytes": "bytes of answered chat turns' token ids kept over all tenants, "
    "so a next turn replaying a turn (a forced tool call) reads it from the cache; 0: off",
    "continuation_max_turns": "answered chat turns kept per tenant (least recently used goes "
    "first); 0: off",
    "router_policy": "how --dp picks a replica per request",
    "cache_threshold": "cache_aware: follow the longest match above this matched/prompt ratio",
    "balance_abs_threshold": "cache_aware: loads differing by more than this are imbalanced...",
    "balance_rel_threshold": "...when also max load > this times min load",
    "max_tree_size": "cache_aware: items kept per replica's approximate radix tree",
    "window_kv_fraction": "models with sliding-window layers: their KV pool's slots per slot "
    "of the full pool (1: one pool for every layer; default 0.5 when the pool is sized from "
    "memory, 1 with --max-total-tokens)",
}


class ServerArgs(NamedTuple):
    model: ModelConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    server: ServerConfig
    router: RouterConfig = RouterConfig()


def make_parser(prog: str = "radixrt serve") -> argparse.ArgumentParser:
    """An ArgumentParser with one flag per config field; defaults come from the dataclasses."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a model over HTTP.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model_tag", nargs="?", default=None, metavar="MODEL",
                        help="the model, as --model-path (vLLM's `vllm serve MODEL`)")  # fmt: skip
    for cls in SERVER_CONFIGS:
        group = parser.add_argument_group(cls.__name__)
        for f in dataclasses.fields(cls):
            _add_flag(group, f)
            if f.name == "disable_radix_cache":
                for flag, action, help_ in _PREFIX_CACHING:
                    group.add_argument(  # (the default is the field's flag's)
                        flag, dest=f.name, action=action, default=argparse.SUPPRESS, help=help_
                    )
    return parser


def parse_args(argv: list[str] | None = None) -> ServerArgs:
    """Parse flags into the four frozen configs; exits with a usage error on a bad value."""
    parser = make_parser()
    ns = vars(parser.parse_args(argv))
    tag = ns.pop("model_tag")
    if tag is not None:
        if ns["model_path"] not in (None, tag):
            parser.error(f"two models: {tag!r} and --model-path {ns['model_path']!r}")
        ns["model_path"] = tag
    try:
        configs = [
            cls(**{f.name: ns[f.name] for f in dataclasses.fields(cls)}) for cls in SERVER_CONFIGS
        ]
    except ValueError as e:
        parser.error(str(e))
    i = SERVER_CONFIGS.index(ServerConfig)
    server: Any = configs[i]
    cache: Any = configs[SERVER_CONFIGS.index(CacheConfig)]
    events = cache.kv_events
    if server.api_key_file is not None and events is not None and events.token_ids:
        ends = events.endpoint, events.replay_endpoint
        if not all(private_ipc(e) for e in ends):
            parser.error(
                "with --api-key-file (tenants), --kv-events-config would send every tenant's "
                'token ids: set "token_ids": false (routers need only the hashes), or use '
                "ipc:// endpoints in a folder only this user can open"
            )
    env_key = os.environ.get("RADIXRT_API_KEY")
    if env_key and server.api_key is None and server.api_key_file is None:
        configs[i] = dataclasses.replace(server, api_key=env_key)
    return ServerArgs(*configs)  # type: ignore[arg-type]  # one instance per SERVER_CONFIGS


def _add_flag(group: Any, f: dataclasses.Field) -> None:
    flags = [f"--{f.name.replace('_', '-')}", *_ALIASES.get(f.name, ())]
    kind = str(f.type).replace(" ", "")
    kwargs: dict[str, Any] = {"dest": f.name, "default": f.default, "help": _HELP.get(f.name, "")}
    if kind == "bool":
        kwargs["action"] = argparse.BooleanOptionalAction if f.default else "store_true"
    else:
        base = kind.removesuffix("|None")
        kwargs["type"] = {"int": int, "float": float, "str": str}[base]
        if f.name in _CHOICES:
            kwargs["choices"] = _CHOICES[f.name]
    group.add_argument(*flags, **kwargs)


def served_model_name(args: ServerArgs) -> str:
    """--served-model-name, else the model file or folder name (without .gguf)."""
    from radixrt.model.families.loader import DEFAULT_GGUF_NAME

    if args.server.served_model_name:
        return args.server.served_model_name
    return Path(args.model.model_path or DEFAULT_GGUF_NAME).name.removesuffix(".gguf")
