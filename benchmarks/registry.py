"""Every runnable benchmark by its short name, in one table grouped by job: what
`python -m benchmarks` lists and runs. A new benchmark is one row here;
tests/bench/test_bench_main.py fails when a runnable module is missing from the table."""

from __future__ import annotations

from typing import NamedTuple

# The jobs, in the order they are listed, with what each group measures.
GROUPS: dict[str, str] = {
    "load": "load on a server or the offline Engine, and the suite that runs it against peers",
    "peers": "the engines radixrt is compared with, each at its best",
    "soak": "one server under long, mixed, partly hostile load",
    "scenarios": "one feature's workload: agents, JSON, programs, tiers, tenants, routing",
    "micro": "engine steps and kernels against this machine's roofline",
}


class Bench(NamedTuple):
    module: str  # run as `python -m MODULE ARGS...`; lives under benchmarks/<group>/
    group: str  # a key of GROUPS
    line: str  # one line for the listing


REGISTRY: dict[str, Bench] = {
    # load
    "loadgen": Bench("benchmarks.load.loadgen", "load",
                     "Poisson sessions against a radixrt or OpenAI-compatible server"),
    "shared_prefix": Bench("benchmarks.load.shared_prefix", "load",
                           "shared-prefix groups on the Engine: radix cache on, off, transformers"),
    "suite": Bench("benchmarks.load.suite", "load",
                   "every workload against every peer in one run (`make bench`)"),
    # peers
    "cpu_peers": Bench("benchmarks.peers.cpu", "peers",
                       "radixrt against vLLM-CPU, llama.cpp, transformers (`make bench-peers`)"),
    "hf_server": Bench("benchmarks.peers.hf_server", "peers",
                       "transformers `generate` behind a minimal OpenAI API (a peer)"),
    # soak
    "soak": Bench("benchmarks.soak.run", "soak",
                  "one server under mixed, hostile load and scheduler pauses for N minutes"),
    # scenarios
    "agent": Bench("benchmarks.scenarios.agent.bench", "scenarios",
                   "forced tool calls over a long tool list, radixrt against vLLM-CPU"),
    "json": Bench("benchmarks.scenarios.json_bench", "scenarios",
                  "JSON extraction: jump-forward and budget masks on/off per grammar backend"),
    "batch": Bench("benchmarks.scenarios.batch_peer", "scenarios",
                   "offline batches: `radixrt run-batch` against vLLM-CPU's `run_batch`"),
    "programs": Bench("benchmarks.scenarios.programs", "scenarios",
                      "the SGLang paper's program workloads against one server"),
    "tiers": Bench("benchmarks.scenarios.tiers", "scenarios",
                   "time to first token from each lower KV tier; a working set 5x the pool"),
    "pinned_doc": Bench("benchmarks.scenarios.pinned_doc", "scenarios",
                        "does a pinned document survive a flood on a small KV pool"),
    "tenant_ttft": Bench("benchmarks.scenarios.tenant_ttft", "scenarios",
                         "does another tenant's cache show in time to first token"),
    "dp_routing": Bench("benchmarks.scenarios.dp_routing", "scenarios",
                        "shared prefixes against a `--dp N` server, once per routing policy"),
    "ray_routing": Bench("benchmarks.scenarios.ray_routing", "scenarios",
                         "Ray Serve: cache-aware routing against round-robin, a replica failure"),
    "spec": Bench("benchmarks.scenarios.spec", "scenarios",
                  "speculative decoding on JSON, code edit, agent and chat, 1 and 8 streams"),
    "prediction": Bench("benchmarks.scenarios.spec_prediction", "scenarios",
                        "predicted outputs on code edits and proofreading, 1 and 8 streams"),
    # micro
    "engine": Bench("benchmarks.micro.engine", "micro",
                    "prefill and decode throughput against transformers and the roofline"),
    "roofline": Bench("benchmarks.micro.roofline", "micro",
                      "this machine's memory bandwidth, matmul rate and the rooflines they imply"),
    "decode_attention": Bench("benchmarks.micro.decode_attention", "micro",
                              "decode attention per ISA: the C kernel against the torch path"),
    "prefill_ops": Bench("benchmarks.micro.prefill_ops", "micro",
                         "one prefill split by op: each CPU kernel, the rest, the matmul probe"),
    "kv_dtype": Bench("benchmarks.micro.kv_dtype", "micro",
                      "float32, bfloat16 and fp8 KV on the CPU: prefill tok/s, decode ms/step"),
    "perplexity": Bench("benchmarks.micro.perplexity", "micro",
                        "perplexity on a fixed text: float32, bfloat16 and int8 weights"),
    "spec_lookup": Bench("benchmarks.micro.spec_lookup", "micro",
                         "batch-1 decoding with and without lookup speculation"),
    "mixed_steps": Bench("benchmarks.micro.mixed_steps", "micro",
                         "the chat workload's steps: decode, mixed, prefill; fused or per module"),
}  # fmt: skip


def listing() -> str:
    """The table as `python -m benchmarks` prints it: by group, in GROUPS order."""
    width = max(len(name) for name in REGISTRY)
    lines = ["`python -m benchmarks NAME [ARGS...]` (or `radixrt bench NAME ...`) runs one of:"]
    for group, about in GROUPS.items():
        lines.append(f"\n{group}/  {about}")
        for name, bench in REGISTRY.items():
            if bench.group == group:
                lines.append(f"  {name:<{width}}  {bench.line}")
    return "\n".join(lines)
