"""JSON extraction on the offline Engine: jump-forward on against off, and budget masks on
against off, for each grammar backend.

    python -m benchmarks json [-n 64] [--max-new-tokens 160]
        [--backends auto llguidance outlines] [--schema bounded|open]

Each request asks, through the chat template, for a 6-field record about one city; all of
them are submitted at once (one client thread each) with the same JSON schema, greedy. The
`bounded` schema caps its strings and numbers; the `open` one has neither, so the model's long
strings run into a tight --max-new-tokens (try 40) unless budget masks close the object in
time. Per pass (backend, jump-forward, budget masks) it prints wall time, output tokens/s,
mean and p90 latency, the share of output tokens that were forced (appended without a decode
step), the number of forward passes, the mask cost per step and per mask, and how many outputs
validate. Per backend it also prints the cold compile time of the schema and the backend's
start-up time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.micro.roofline import close_machine_info, machine_info
from radixrt.core.other_load import OtherLoad
from radixrt.grammar import GRAMMAR_BACKENDS
from radixrt.grammar.base import GrammarSpec

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "country": {"type": "string", "maxLength": 24},
        "population": {"type": "integer", "minimum": 0, "maximum": 40000000},
        "founded": {"type": "integer", "minimum": -3000, "maximum": 2100},
        "is_capital": {"type": "boolean"},
        "language": {"type": "string", "maxLength": 16},
    },
    "required": ["city", "country", "population", "founded", "is_capital", "language"],
    "additionalProperties": False,
}
# The same record without any bound: strings as long as the model writes them.
OPEN_SCHEMA = {
    "type": "object",
    "properties": {
        k: {"type": v["type"]} if "type" in v else v for k, v in SCHEMA["properties"].items()
    },
    "required": SCHEMA["required"],
    "additionalProperties": False,
}
SCHEMAS = {"bounded": SCHEMA, "open": OPEN_SCHEMA}
CITIES = [
    "Paris",
    "Tokyo",
    "Lima",
    "Cairo",
    "Oslo",
    "Lagos",
    "Hanoi",
    "Quito",
    "Rome",
    "Seoul",
    "Perth",
    "Dakar",
    "Porto",
    "Kyoto",
    "Delhi",
    "Dublin",
]
ASPECTS = ["a short profile", "the key facts", "a summary", "an encyclopedia entry"]


@dataclass(slots=True)
class PassResult:
    backend: str
    jump_forward: bool
    budget: bool  # budget masks on (they act only where the backend bounds lengths)
    num_requests: int
    wall_s: float
    out_tok_s: float
    mean_latency_s: float
    p90_latency_s: float
    output_tokens: int
    forced_tokens: int
    forced_share: float
    forward_passes: int
    mask_ms_per_step: float  # batch mask building (all constrained rows) per sampling step
    mask_us_per_mask: float  # one request's mask
    num_valid: int
    other_cpu: float | None


def prompts(tokenizer: Any, n: int) -> list[str]:
    """n prompts (chat-templated when the tokenizer has a template) asking for a record each."""
    out = []
    for i in range(n):
        city, aspect = CITIES[i % len(CITIES)], ASPECTS[(i // len(CITIES)) % len(ASPECTS)]
        msg = (
            f"Give {aspect} of {city} as JSON: city, country, population, founded, "
            "is_capital, language."
        )
        if getattr(tokenizer, "chat_template", None):
            msg = tokenizer.apply_chat_template(
                [{"role": "user", "content": msg}], tokenize=False, add_generation_prompt=True
            )
        out.append(msg)
    return out


def run_pass(
    engine: Any,
    texts: list[str],
    max_new_tokens: int,
    backend: str,
    jump_forward: bool,
    budget: bool = True,
    schema: dict[str, Any] = SCHEMA,
) -> PassResult:
    """All requests at once from one thread each; cache flushed first."""
    sched = engine.scheduler
    sched.grammar.jump_forward = jump_forward
    sched.grammar.budget = budget
    engine.flush_cache()
    g0, s0 = _grammar_counters(sched), (sched.stats.forward_passes, sched.stats.generated_tokens)
    params = {"json_schema": schema, "temperature": 0, "max_new_tokens": max_new_tokens}
    load = OtherLoad()
    start = time.perf_counter()

    def one(text: str) -> tuple[dict[str, Any], float]:
        out = engine.generate(text, params)
        return out, time.perf_counter() - start

    with ThreadPoolExecutor(len(texts)) as pool:
        results = list(pool.map(one, texts))
    wall = time.perf_counter() - start
    g1 = _grammar_counters(sched)
    forced, mask_s, num_masks, mask_steps = (b - a for a, b in zip(g0, g1, strict=True))
    output_tokens = sum(len(r["output_ids"]) for r, _ in results)
    latencies = sorted(t for _, t in results)
    return PassResult(
        backend=backend,
        jump_forward=jump_forward,
        budget=budget,
        num_requests=len(texts),
        wall_s=wall,
        out_tok_s=output_tokens / wall,
        mean_latency_s=statistics.fmean(latencies),
        p90_latency_s=latencies[int(0.9 * (len(latencies) - 1))],
        output_tokens=output_tokens,
        forced_tokens=int(forced),
        forced_share=forced / max(output_tokens, 1),
        forward_passes=sched.stats.forward_passes - s0[0],
        mask_ms_per_step=1e3 * mask_s / max(mask_steps, 1),
        mask_us_per_mask=1e6 * mask_s / max(num_masks, 1),
        num_valid=sum(_is_valid(r, schema) for r, _ in results),
        other_cpu=load.fraction(),
    )


def compile_times(engine: Any, schema: dict[str, Any] = SCHEMA) -> dict[str, float]:
    """Backend start-up and a cold compile of `schema` (seconds)."""
    compiler = engine.scheduler.grammar.compiler
    t0 = time.perf_counter()
    compiler.backend  # noqa: B018 - builds the backend
    t1 = time.perf_counter()
    compiler.backend.compile(GrammarSpec("json_schema", json.dumps(schema)))
    return {"backend_init_s": t1 - t0, "compile_s": time.perf_counter() - t1}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from radixrt.serve.engine import Engine

    machine, load = machine_info(), OtherLoad()
    schema = SCHEMAS[args.schema]
    passes: list[PassResult] = []
    compiles: dict[str, dict[str, float]] = {}
    for backend in args.backends:
        with Engine(
            args.model_path,
            grammar_backend=backend,
            max_total_tokens=args.max_total_tokens,
            max_running_requests=args.num_requests,
        ) as engine:
            compiles[backend] = compile_times(engine, schema)
            texts = prompts(engine.tokenizer, args.num_requests)
            run_pass(engine, texts[:2], args.max_new_tokens, backend, True, True, schema)  # warm
            for jump_forward, budget in ((True, True), (False, True), (True, False)):
                passes.append(
                    run_pass(
                        engine, texts, args.max_new_tokens, backend, jump_forward, budget, schema
                    )
                )
    print(_table(passes, compiles))
    print(close_machine_info(machine, load))
    result = {"machine": machine, "compile": compiles, "passes": [asdict(p) for p in passes]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: the bundled SmolLM2")
    p.add_argument("-n", "--num-requests", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--max-total-tokens", type=int, default=32768)
    p.add_argument(
        "--backends", nargs="+", default=list(GRAMMAR_BACKENDS), choices=list(GRAMMAR_BACKENDS)
    )
    p.add_argument("--schema", choices=sorted(SCHEMAS), default="bounded")
    p.add_argument("--json", metavar="OUT", default=None, help="also write the results here")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run(build_parser().parse_args(argv))


def _grammar_counters(sched: Any) -> tuple[float, float, float, float]:
    s = sched.grammar.stats
    return s.forced_tokens, s.mask_time_s, s.num_masks, s.mask_steps


def _is_valid(result: dict[str, Any], schema: dict[str, Any]) -> bool:
    if result["meta_info"]["finish_reason"]["type"] != "stop":
        return False
    try:
        record = json.loads(result["text"])
    except ValueError:
        return False
    return isinstance(record, dict) and set(record) == set(schema["properties"])


def _table(passes: list[PassResult], compiles: dict[str, dict[str, float]]) -> str:
    lines = [
        "| backend | jump-forward | budget masks | wall s | out tok/s | mean lat s | p90 lat s | "
        "forced | forwards | mask ms/step | mask us/mask | valid | others' CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in passes:
        other = "?" if p.other_cpu is None else f"{100 * p.other_cpu:.0f}%"
        lines.append(
            f"| {p.backend} | {'on' if p.jump_forward else 'off'} | "
            f"{'on' if p.budget else 'off'} | {p.wall_s:.2f} | "
            f"{p.out_tok_s:.1f} | {p.mean_latency_s:.2f} | {p.p90_latency_s:.2f} | "
            f"{100 * p.forced_share:.0f}% | {p.forward_passes} | {p.mask_ms_per_step:.2f} | "
            f"{p.mask_us_per_mask:.0f} | {p.num_valid}/{p.num_requests} | {other} |"
        )
    lines += ["", "| backend | start-up s | schema compile ms |", "|---|---|---|"]
    for name, c in compiles.items():
        lines.append(f"| {name} | {c['backend_init_s']:.2f} | {1e3 * c['compile_s']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
