"""Speculative decoding while sampling, on a tiny random Llama with a 16-token vocabulary (so
drafts are often accepted at temperature 1): the emitted tokens' distribution is the one
without speculation (chi-square over a few thousand draws), and seeded requests give the same
tokens with and without it. The pool is whole after every run."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from safetensors.torch import load_file, save_file
from tiny_models import make_tiny

from radixrt.core import Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.speculative.step_cost import StepCost

VOCAB = 16
PROMPT = [5, 6, 7, 8] * 3 + [5, 6]  # its own n-grams draft 7, 8, 5, 6, ...
POSITIONS = 5  # the output positions whose histograms are compared


@pytest.fixture(scope="module")
def small_vocab_path(tmp_path_factory, smollm2_path):
    """Its output layer scaled up, so the next token is likely, not near uniform."""
    path = make_tiny(tmp_path_factory.mktemp("tiny_v16"), smollm2_path, "llama",
                      vocab_size=VOCAB)  # fmt: skip
    weights = load_file(path / "model.safetensors")
    weights["lm_head.weight"] *= 6.0
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


def _build(path, k: int):
    """On torch's ops: their extend and decode logits agree to float rounding (radixrt's C
    kernels differ by more, enough to move a seeded draw now and then)."""
    scheduler, _ = build_scheduler(
        ModelConfig(
            model_path=str(path),
            context_length=128,
            attention_backend="torch_native",
            cpu_kernels="off",
        ),
        CacheConfig(max_total_tokens=16384),
        SchedulerConfig(speculative_num_draft_tokens=k, max_running_requests=512),
    )
    return scheduler


@pytest.fixture(scope="module")
def pair(small_vocab_path):
    spec = _build(small_vocab_path, 4)
    spec.speculation.depths.cost = StepCost(fixed_k=1e6)  # rows free: 600 at once draft
    return _build(small_vocab_path, 0), spec


def _run(s, reqs: list[Req]) -> list[list[int]]:
    for r in reqs:
        s.add_request(r)
    while not s.is_idle:
        s.step()
        s.kv.check_whole(sum(s.kv.slots_held(r) for r in s.running))
    s.check_pool_whole()
    assert s.kv.cache.protected_size == 0
    return [r.output_ids for r in reqs]


def _draws(s, n: int, **params) -> list[list[int]]:
    sp = SamplingParams(max_new_tokens=POSITIONS, ignore_eos=True, **params)
    return _run(s, [Req(f"r{i}", list(PROMPT), sp) for i in range(n)])


def _chi2_z(a: list[list[int]], b: list[list[int]]) -> float:
    """Two-sample chi-square over each position's token histogram, summed over positions;
    returned as a standard normal score (Wilson-Hilferty), large when they differ."""
    stat, df = 0.0, 0
    for pos in range(POSITIONS):
        ca, cb = Counter(x[pos] for x in a), Counter(x[pos] for x in b)
        na, nb = len(a), len(b)
        for t in set(ca) | set(cb):
            oa, ob = ca[t], cb[t]
            if oa + ob < 10:  # too rare to test; their mass is small either way
                continue
            ea, eb = (oa + ob) * na / (na + nb), (oa + ob) * nb / (na + nb)
            stat += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
            df += 1
        df -= 1
    h = 2 / (9 * df)
    return ((stat / df) ** (1 / 3) - (1 - h)) / math.sqrt(h)


@pytest.mark.parametrize(("n", "params"), [(1000, {"temperature": 1.0}),
                                           (600, {"temperature": 1.3, "top_k": 5, "top_p": 0.9,
                                                   "min_p": 0.02})])  # fmt: skip
def test_sampled_distribution_unchanged(pair, n: int, params) -> None:
    plain, spec = pair
    for s in pair:
        s.kv.cache.reset()
    ref = _draws(plain, n, **params)
    before = spec.stats.spec_accepted_tokens
    got = _draws(spec, n, **params)
    assert spec.stats.spec_accepted_tokens - before > n // 5  # drafts were accepted often
    z = _chi2_z(ref, got)
    assert z < 4.0, z  # p < 1e-4 under the same distribution; always-accepting drafts: z >> 10


def test_seeded_tokens_unchanged(pair) -> None:
    plain, spec = pair
    for s in pair:
        s.kv.cache.reset()

    def reqs() -> list[Req]:
        return [
            Req(
                f"s{i}",
                list(PROMPT),
                SamplingParams(
                    max_new_tokens=16,
                    ignore_eos=True,
                    seed=i,
                    temperature=[1.0, 0.6][i % 2],
                    top_p=[1.0, 0.95][i % 3 == 0],
                    min_p=[0.0, 0.05][i % 5 == 0],
                ),
            )  # fmt: skip
            for i in range(16)
        ]

    ref = _run(plain, reqs())
    got = reqs()
    assert _run(spec, got) == ref
    assert sum(r.spec_accepted for r in got) > 16
