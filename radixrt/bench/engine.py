"""Prefill and decode throughput of radixrt against transformers, beside this machine's roofline.

    python -m radixrt.bench.engine [--prefill-lens 256 1024 2048] [--batch-sizes 1 8 32] [--tp 2]

radixrt runs on a scheduler stepped in this thread (no engine thread, radix cache off), so the
timings are of steps alone: prefill = the one step that computes a prompt and samples its first
token (best of --repeats); decode = steps in which every request of the batch decodes one token
(median step; interference from other processes only ever adds time, in spikes).
With --tp N the steps run on N tensor-parallel ranks (their CPU time counts as the benchmark's
own), and the parameter and weight-byte counts are rank 0's shard.

A shared machine's speed drifts from minute to minute, so each row runs in --rounds rounds,
each of which measures the roofline, then radixrt, then transformers: every figure of a row
(and its roofline) is taken over the same stretch of time, interleaved.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from radixrt.bench.engine_tables import format_tables
from radixrt.bench.hf_peer import hf_generate, load_hf_model
from radixrt.bench.roofline import (
    OtherLoad,
    Roofline,
    add_roofline_args,
    close_machine_info,
    format_roofline,
    machine_info,
    measure_roofline,
)
from radixrt.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.core import Req, SamplingParams

PREFILL_LENS = (256, 1024, 2048)
BATCH_SIZES = (1, 8, 32)
DECODE_STEPS = 32
DECODE_PROMPT_LEN = 128
REPEATS = 2
ROUNDS = 2
PROBE_REPEATS = 3  # roofline measurements per round: best of this many
SEED = 0
RETRIES = 2
MAX_OTHER_CPU = 0.1
_RETRY_WAIT_S = 5.0
_FIRST_ID = 256  # random prompts avoid the low ids, where tokenizers keep special tokens


@dataclass(slots=True)
class PrefillRow:
    prompt_len: int
    radixrt_tok_s: float
    hf_tok_s: float | None
    roofline_tok_s: float  # matmul rate (best probe of the row) / (2 * params)
    first_token_match: bool | None  # radixrt's first greedy token == transformers'
    other_cpu: float | None  # CPU share of other processes while this row ran
    exact_roofline_tok_s: float = 0.0  # the same rate over the prompt's exact FLOPs


@dataclass(slots=True)
class DecodeRow:
    batch_size: int
    radixrt_ms_step: float  # median
    radixrt_ms_mean: float
    hf_ms_step: float | None  # median
    hf_ms_mean: float | None
    roofline_ms_step: float
    greedy_match: int | None  # requests whose greedy tokens equal transformers' exactly
    other_cpu: float | None

    @property
    def radixrt_tok_s(self) -> float:
        return 1e3 * self.batch_size / self.radixrt_ms_step

    @property
    def hf_tok_s(self) -> float | None:
        return None if self.hf_ms_step is None else 1e3 * self.batch_size / self.hf_ms_step

    @property
    def roofline_tok_s(self) -> float:
        return 1e3 * self.batch_size / self.roofline_ms_step

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            radixrt_tok_s=self.radixrt_tok_s,
            hf_tok_s=self.hf_tok_s,
            roofline_tok_s=self.roofline_tok_s,
        )
        return d


_Row = TypeVar("_Row", "PrefillRow", "DecodeRow")


def random_prompts(num: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    """`num` prompts of `length` uniform random token ids (fixed seed)."""
    rng = random.Random(seed)
    return [[rng.randrange(_FIRST_ID, vocab_size) for _ in range(length)] for _ in range(num)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure everything; print the tables and return them as a dict."""
    from radixrt.scheduler.builder import build_scheduler

    machine = machine_info()
    print(f"machine: {machine}", flush=True)
    max_batch, max_len = max(args.batch_sizes), max(args.prefill_lens)
    pool = max(max_len + 64, max_batch * (args.decode_prompt_len + args.decode_steps + 64))
    sched, _ = build_scheduler(
        ModelConfig(
            args.model_path,
            dtype="float32",
            device="cpu",
            tp_size=args.tp,
            disable_cpu_kernels=args.disable_cpu_kernels,
        ),
        CacheConfig(max_total_tokens=pool, disable_radix_cache=True),
        SchedulerConfig(
            max_running_requests=max(max_batch, 64), chunked_prefill_size=max(max_len, 2048)
        ),
    )
    try:
        return _run(sched, machine, args)
    finally:
        sched.runner.shutdown()


def _run(sched: Any, machine: dict[str, Any], args: argparse.Namespace) -> dict:
    load = OtherLoad(sched.runner.tp_group.pids)
    print(f"radixrt CPU kernels: {'on' if sched.runner.cpu_kernels else 'off'}", flush=True)
    # Counted at load, before the CPU kernels repack the linear weights (the tied LM head
    # then has its own packed copy, which a step reads instead of the embedding table).
    num_params, weight_bytes = sched.runner.num_params, sched.runner.weight_bytes
    vocab = sched.runner.arch.vocab_size
    hf = None if args.skip_hf else load_hf_model(sched.runner.model_path)

    _warm_up(sched, hf, vocab)
    rows = Rows(sched, hf, vocab, num_params, weight_bytes, args)
    prefill = [_quietest(lambda n=n: rows.prefill(n), args) for n in args.prefill_lens]
    decode = [_quietest(lambda b=b: rows.decode(b), args) for b in args.batch_sizes]
    sched.check_pool_whole()
    roof = rows.best_probe  # the run-wide line: every row's probes, best of each rate
    print(format_roofline(roof, num_params, weight_bytes))
    print(format_tables(prefill, decode, args))
    print(close_machine_info(machine, load))
    return {
        "machine": machine,
        "roofline": roof.to_dict(),
        "num_params": num_params,
        "weight_bytes": weight_bytes,
        "tp_size": args.tp,
        "cpu_kernels": sched.runner.cpu_kernels,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "decode_prompt_len": args.decode_prompt_len,
        "decode_steps": args.decode_steps,
        "prefill": [asdict(r) for r in prefill],
        "decode": [r.to_dict() for r in decode],
    }


# ---- radixrt --------------------------------------------------------------------------------


def radixrt_prefill(sched: Any, ids: list[int]) -> tuple[float, int]:
    """(seconds, first token) of prefilling `ids` and sampling one token on an idle scheduler."""
    req = _req(ids, max_new_tokens=1)
    sched.add_request(req)
    t0 = time.perf_counter()
    while not sched.is_idle:
        sched.step()
    elapsed = time.perf_counter() - t0
    if req.finish_reason is None or len(req.output_ids) != 1:
        raise RuntimeError(f"prefill request ended badly: {req.finish_reason}, {req.output_ids}")
    return elapsed, req.output_ids[0]


def radixrt_decode(
    sched: Any, prompts: list[list[int]], steps: int
) -> tuple[list[float], list[list[int]]]:
    """(seconds of each of `steps` steps with the whole batch decoding, greedy tokens so far).

    Prefill steps run untimed until every request has its first token; the requests ask for
    more tokens than are timed and are aborted afterwards, so no timed step loses a request.
    """
    reqs = [_req(ids, max_new_tokens=steps + 64) for ids in prompts]
    for r in reqs:
        sched.add_request(r)
    while sched.waiting or any(not r.output_ids for r in reqs):
        sched.step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        touched = sched.step()
        times.append(time.perf_counter() - t0)
        if len(touched) != len(reqs) or any(r.is_finished for r in reqs):
            raise RuntimeError(f"a decode step touched {len(touched)} of {len(reqs)} requests")
    for r in reqs:
        sched.abort(r.rid)
    sched.check_pool_whole()
    return times, [list(r.output_ids) for r in reqs]


def _req(ids: list[int], max_new_tokens: int) -> Req:
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True)
    return Req(uuid.uuid4().hex, list(ids), params)


# ---- rows (rooflines are filled in by `run`) ------------------------------------------------


def _warm_up(sched: Any, hf: Any, vocab: int) -> None:
    prompts = random_prompts(2, 32, vocab, SEED + 99)
    radixrt_prefill(sched, prompts[0])
    radixrt_decode(sched, prompts, 2)
    if hf is not None:
        hf_generate(hf, prompts, 3)


def _quietest(measure: Callable[[], _Row], args: argparse.Namespace) -> _Row:
    """Measure a row; while other processes used more than --max-other-cpu of the cores, wait
    a little and measure it again (at most --retries times), keeping the least disturbed."""
    best = measure()
    for _ in range(args.retries):
        if best.other_cpu is None or best.other_cpu <= args.max_other_cpu:
            break
        time.sleep(_RETRY_WAIT_S)
        row = measure()
        if row.other_cpu is not None and row.other_cpu < best.other_cpu:
            best = row
    return best


class Rows:
    """Measures rows: per round the roofline, radixrt, then transformers (see the docstring)."""

    def __init__(
        self, sched: Any, hf: Any, vocab: int, num_params: int, weight_bytes: int,
        args: argparse.Namespace,
    ) -> None:  # fmt: skip
        self.sched, self.hf, self.vocab, self.args = sched, hf, vocab, args
        self.num_params, self.weight_bytes = num_params, weight_bytes
        self.arch, self.tp = sched.runner.arch, args.tp
        self.best_probe = Roofline(0.0, 0.0, 0.0)  # over every row, for the summary line

    def _probe(self, roof: Roofline | None) -> Roofline:
        a = self.args
        probe = measure_roofline(a.copy_mib, a.matmul_n, PROBE_REPEATS)
        self.best_probe = self.best_probe.best(probe)
        return probe if roof is None else roof.best(probe)

    def prefill(self, n: int) -> PrefillRow:
        sched, hf, args = self.sched, self.hf, self.args
        load = OtherLoad(sched.runner.tp_group.pids)
        ids = random_prompts(1, n, self.vocab, args.seed + n)[0]
        roof, ours, theirs = None, [], []
        for _ in range(args.rounds):
            roof = self._probe(roof)
            ours += [radixrt_prefill(sched, ids) for _ in range(args.repeats)]
            if hf is not None:
                theirs += [hf_generate(hf, [ids], 1) for _ in range(args.repeats)]
        row = PrefillRow(n, n / min(t for t, _ in ours), None, 0.0, None, None)
        row.roofline_tok_s = roof.prefill_tok_s(self.num_params)
        flops = exact_prefill_flops(self.arch, n, self.tp)
        row.exact_roofline_tok_s = n * roof.matmul_gflops * 1e9 / flops
        if theirs:
            row.hf_tok_s = n / min(r.ttft_s for r in theirs)
            row.first_token_match = theirs[0].output_ids[0][0] == ours[0][1]
        row.other_cpu = load.fraction()
        return row

    def decode(self, batch: int) -> DecodeRow:
        sched, hf, args = self.sched, self.hf, self.args
        load = OtherLoad(sched.runner.tp_group.pids)
        steps = args.decode_steps
        prompts = random_prompts(batch, args.decode_prompt_len, self.vocab,
                                 args.seed + 1000 + batch)  # fmt: skip
        roof, ours, theirs, match = None, [], [], None
        for _ in range(args.rounds):
            roof = self._probe(roof)
            times, ours_ids = radixrt_decode(sched, prompts, steps)
            ours += times
            if hf is not None:
                # max_new_tokens = steps + 1: one token from the prefill, then `steps` passes.
                r = hf_generate(hf, prompts, steps + 1)
                theirs += r.step_s
                pairs = zip(ours_ids, r.output_ids, strict=True)
                same = sum(a[: steps + 1] == b for a, b in pairs)
                match = same if match is None else min(match, same)
        row = DecodeRow(
            batch, 1e3 * statistics.median(ours), 1e3 * statistics.mean(ours), None, None,
            1e3 * roof.decode_step_s(self.weight_bytes, self.num_params, batch), match, None,
        )  # fmt: skip
        if theirs:
            row.hf_ms_step = 1e3 * statistics.median(theirs)
            row.hf_ms_mean = 1e3 * statistics.mean(theirs)
        row.other_cpu = load.fraction()
        return row


def exact_prefill_flops(arch: Any, n: int, tp: int = 1) -> float:
    """FLOPs of prefilling n tokens and computing the last one's logits, per tensor-parallel
    rank: the layers' matmuls for every token, causal attention (n(n+1)/2 query-key pairs,
    a multiply-add each for the scores and for the weighted values), the LM head once."""
    d, h = arch.hidden_size, arch.num_attention_heads * arch.head_dim
    kv = arch.num_key_value_heads * arch.head_dim
    layer = d * (h + 2 * kv) + h * d + 3 * d * arch.intermediate_size
    attention = 4 * h * n * (n + 1) / 2
    per_layer = 2 * layer * n + attention
    return (arch.num_hidden_layers * per_layer + 2 * d * arch.vocab_size) / tp


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("--prefill-lens", type=int, nargs="+", default=list(PREFILL_LENS))
    p.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    p.add_argument("--decode-steps", type=int, default=DECODE_STEPS, help="timed steps per batch")
    p.add_argument("--decode-prompt-len", type=int, default=DECODE_PROMPT_LEN)
    p.add_argument("--repeats", type=int, default=REPEATS, help="prefill: best of this many")
    p.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help="each row alternates roofline, radixrt and transformers this many times",
    )
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument(
        "--retries",
        type=int,
        default=RETRIES,
        help="re-measure a row disturbed by other processes up to this many times",
    )
    p.add_argument(
        "--max-other-cpu",
        type=float,
        default=MAX_OTHER_CPU,
        help="a row is disturbed when other processes used more than this share of the cores",
    )
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (gloo on CPU)")
    p.add_argument("--skip-hf", action="store_true", help="radixrt and the roofline only")
    p.add_argument(
        "--disable-cpu-kernels", action="store_true", help="radixrt on torch ops, not csrc/cpu"
    )
    p.add_argument("--json", metavar="OUT", default=None, help="also write the results here")
    add_roofline_args(p)
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    results = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
