"""The engine benchmark's rows: radixrt's timed prefill and decode steps, transformers beside
them, and the roofline probes, interleaved per round (see micro/engine.py).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from benchmarks.micro.roofline import Roofline, arithmetic_dtype, measure_roofline
from benchmarks.peers.hf_peer import hf_generate
from radixrt.core import Req, SamplingParams
from radixrt.core.other_load import OtherLoad

PROBE_REPEATS = 3  # roofline measurements per round: best of this many
WARM_UP_SEED = 99  # the warm-up's prompts, apart from every measured row's
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


def warm_up(sched: Any, hf: Any, vocab: int) -> None:
    prompts = random_prompts(2, 32, vocab, WARM_UP_SEED)
    radixrt_prefill(sched, prompts[0])
    radixrt_decode(sched, prompts, 2)
    if hf is not None:
        hf_generate(hf, prompts, 3)


def quietest(measure: Callable[[], _Row], args: argparse.Namespace) -> _Row:
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
        # the roofline's matmul runs in the arithmetic's dtype (with bfloat16 on radixrt's CPU
        # kernels the runner's activations stay float32; its linear weights are bfloat16)
        self.dtype = arithmetic_dtype(args.dtype, args.cpu_kernels)
        # over every row, for the summary line
        self.best_probe = Roofline(0.0, 0.0, 0.0, str(self.dtype).removeprefix("torch."))

    def _probe(self, roof: Roofline | None) -> Roofline:
        a = self.args
        probe = measure_roofline(a.copy_mib, a.matmul_n, PROBE_REPEATS, self.dtype)
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
