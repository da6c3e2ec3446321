"""What `python -m benchmarks spec` does with any peer's OpenAI server: the workloads' batches
sent through /v1/completions (each prompt a request, a batch at once), output tokens per
second by its usage counts, and its two servers' (without and with speculation) ratios. The
peers' own modules say how each is started and what its requests carry (spec_vllm.py,
spec_llama.py)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

# A request body for a peer's /v1/completions: (prompt, the workload's radixrt params) -> JSON.
Body = Callable[[str, dict[str, Any]], dict[str, Any]]


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
            runs: int, body: Body, reset: str | None,
            warm: bool = False) -> dict[str, dict[str, Any]]:  # fmt: skip
    """`workload/streams` -> median output tokens/s over `runs` and the texts, on one server
    whose requests are `body` (its prefix cache reset by POST to `reset`, where it needs it);
    `warm`: each batch's prompts cached before it is timed."""
    out: dict[str, dict[str, Any]] = {}
    for name, (prompts, params) in cases.items():
        for n in streams:
            batches = [prompts[i : i + n] for i in range(0, len(prompts), n)]
            _batch(url, batches[0], params, body, reset, warm)  # warm-up
            rates: list[float] = []
            texts: list[str] = []
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
