"""Sampler and penalties on CPU: each SamplingParams feature, seeds and logprobs."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.core import Req, SamplingParams
from radixrt.executor.draws import _nucleus_threshold
from radixrt.executor.penalties import apply_penalties
from radixrt.executor.sampler import Sampler

EOS = 0


def make_req(input_ids: list[int] | None = None, output_ids: list[int] | None = None, **sp) -> Req:
    return Req("r", input_ids or [1], SamplingParams(**sp), output_ids=list(output_ids or []))


def draw(logits: list[float], n: int = 2000, **sp) -> Counter:
    """Token counts of n independent draws from one row of logits."""
    sampler = Sampler(len(logits), [EOS])
    batch = torch.tensor([logits]).repeat(n, 1)
    return Counter(sampler.sample(batch, [make_req(**sp) for _ in range(n)]).next_token_ids)


def entropy(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())


def log_probs(probs: list[float]) -> list[float]:
    return [math.log(p) for p in probs]


def test_greedy_is_argmax_and_input_untouched() -> None:
    torch.manual_seed(0)
    logits = torch.randn(8, 100)
    before = logits.clone()
    reqs = [make_req(temperature=0.0, repetition_penalty=1.3, input_ids=[5, 6]) for _ in range(8)]
    Sampler(100, [EOS]).sample(logits, reqs)
    assert torch.equal(logits, before)
    out = Sampler(100, [EOS]).sample(logits, [make_req(temperature=0.0) for _ in range(8)])
    assert out.next_token_ids == logits.argmax(-1).tolist()
    assert out.logprobs is None and out.top_logprobs is None


def test_top_k_one_equals_greedy() -> None:
    torch.manual_seed(1)
    logits = torch.randn(16, 50)
    out = Sampler(50, [EOS]).sample(logits, [make_req(top_k=1) for _ in range(16)])
    assert out.next_token_ids == logits.argmax(-1).tolist()


def test_temperature_controls_entropy() -> None:
    logits = [2.0, 1.5, 1.0, 0.5, 0.0, -0.5]
    cold = draw(logits, temperature=0.02)
    hot = draw(logits, temperature=5.0)
    assert entropy(cold) == 0.0 and cold[0] == 2000
    assert entropy(hot) > 1.6  # ln(6) = 1.79 is uniform


def test_plain_sampling_matches_softmax() -> None:
    probs = [0.5, 0.25, 0.15, 0.1]
    counts = draw(log_probs(probs), n=20000)
    for token, p in enumerate(probs):
        assert abs(counts[token] / 20000 - p) < 0.02


def test_top_k_never_leaves_top_k() -> None:
    torch.manual_seed(2)
    logits = torch.randn(200).tolist()
    top5 = set(torch.tensor(logits).topk(5).indices.tolist())
    counts = draw(logits, n=4000, top_k=5, temperature=3.0)
    assert set(counts) == top5


def test_small_top_p_keeps_only_top_token() -> None:
    torch.manual_seed(3)
    logits = torch.randn(300).tolist()
    counts = draw(logits, top_p=1e-6, temperature=2.0)
    assert set(counts) == {max(range(300), key=logits.__getitem__)}


def test_top_p_keeps_smallest_set_reaching_p() -> None:
    counts = draw(log_probs([0.4, 0.3, 0.2, 0.1]), top_p=0.5)
    assert set(counts) == {0, 1}
    assert abs(counts[0] / 2000 - 0.4 / 0.7) < 0.05


def test_top_p_is_relative_to_top_k_mass() -> None:
    # Top-2 renormalized is [0.57, 0.43]: top_p=0.5 then keeps token 0 alone.
    counts = draw(log_probs([0.4, 0.3, 0.2, 0.1]), top_k=2, top_p=0.5)
    assert set(counts) == {0}


def test_min_p_drops_tokens_below_fraction_of_max() -> None:
    counts = draw(log_probs([0.5, 0.3, 0.15, 0.05]), n=4000, min_p=0.2)
    assert set(counts) == {0, 1, 2}


def test_nucleus_reaching_into_a_long_flat_tail() -> None:
    # One token of mass ~0.95 and 5000 tied tokens holding the rest: the nucleus ends in the tail.
    logits = [0.0] + [-11.5] * 5000
    counts = draw(logits, n=1000, top_p=0.999)
    p_top = 1 / (1 + 5000 * math.exp(-11.5))
    assert abs(counts[0] / 1000 - p_top / 0.999) < 0.03
    assert len(counts) > 20


def test_repetition_penalty_changes_argmax() -> None:
    logits = torch.tensor([[2.0, 1.9, -1.0, 0.5]])
    req = make_req(input_ids=[0], output_ids=[2], temperature=0.0, repetition_penalty=1.2)
    out = apply_penalties(logits, [req], [EOS])
    assert torch.allclose(out, torch.tensor([[2.0 / 1.2, 1.9, -1.2, 0.5]]))
    assert Sampler(4, [EOS]).sample(logits, [req]).next_token_ids == [1]


def test_frequency_and_presence_penalties_use_output_counts() -> None:
    logits = torch.zeros(2, 5)
    reqs = [
        make_req(input_ids=[4, 4], output_ids=[1, 1, 1, 2], frequency_penalty=0.5),
        make_req(input_ids=[4, 4], output_ids=[1, 1, 1, 2], presence_penalty=0.7),
    ]
    out = apply_penalties(logits, reqs, [EOS])
    assert torch.allclose(out[0], torch.tensor([0.0, -1.5, -0.5, 0.0, 0.0]))
    assert torch.allclose(out[1], torch.tensor([0.0, -0.7, -0.7, 0.0, 0.0]))
    assert torch.equal(logits, torch.zeros(2, 5))
    greedy = make_req(output_ids=[3, 3], temperature=0.0, frequency_penalty=1.0)
    assert (
        Sampler(5, [EOS]).sample(torch.tensor([[0, 0, 0, 1.5, 0]]), [greedy]).next_token_ids[0] != 3
    )


def test_logit_bias_adds_to_the_listed_tokens_before_the_penalties() -> None:
    logits = torch.tensor([[2.0, 1.0, -1.0, 0.5], [2.0, 1.0, -math.inf, 0.5]])
    reqs = [
        make_req(temperature=0.0, logit_bias={1: 3.0, 3: -100.0}),
        make_req(temperature=0.0, logit_bias={2: 100.0}, output_ids=[1], presence_penalty=1.0),
    ]
    out = apply_penalties(logits, reqs, [EOS])
    assert torch.allclose(out[0], torch.tensor([2.0, 4.0, -1.0, -99.5]))
    # A token the grammar masked (-inf) stays masked whatever its bias.
    assert out[1].tolist() == [2.0, 0.0, -math.inf, 0.5]
    assert logits[0].tolist() == [2.0, 1.0, -1.0, 0.5]  # not written
    assert Sampler(4, [EOS]).sample(logits, reqs).next_token_ids == [1, 0]
    # +100 all but forces a token, sampled or greedy; -100 all but bans it.
    forced = draw([0.0, 5.0, 3.0, 0.0], n=500, logit_bias={3: 100.0})
    assert forced == Counter({3: 500})
    banned = draw([0.0, 5.0, 3.0, 0.0], n=2000, logit_bias={1: -100.0})
    assert 1 not in banned and banned[2] > 1500


def test_logit_bias_leaves_logprobs_the_models() -> None:
    logits = torch.tensor([[2.0, 1.0, -1.0, 0.5]])
    req = make_req(temperature=0.0, logit_bias={2: 50.0}, return_logprob=True)
    out = Sampler(4, [EOS]).sample(logits, [req])
    assert out.next_token_ids == [2]
    assert out.logprobs == pytest.approx([torch.log_softmax(logits[0], -1)[2].item()])


def test_allowed_token_ids_leave_only_those_ids_before_the_bias() -> None:
    logits = torch.tensor([[2.0, 1.0, -1.0, 0.5], [2.0, 1.0, -1.0, 0.5], [3.0, 1.0, 0.0, 0.0]])
    reqs = [
        make_req(temperature=0.0, allowed_token_ids=[1, 3]),
        make_req(temperature=0.0),  # a row without: as it was
        make_req(temperature=0.0, allowed_token_ids=[2, 3], logit_bias={3: 5.0, 0: 50.0}),
    ]
    out = apply_penalties(logits, reqs, [EOS])
    assert out[0].tolist() == [-math.inf, 1.0, -math.inf, 0.5]
    assert out[1].tolist() == [2.0, 1.0, -1.0, 0.5]
    assert out[2].tolist() == [-math.inf, -math.inf, 0.0, 5.0]  # the bias cannot lift token 0
    assert logits[0].tolist() == [2.0, 1.0, -1.0, 0.5]  # not written
    assert Sampler(4, [EOS]).sample(logits, reqs).next_token_ids == [1, 0, 3]
    drawn = draw([0.0, 5.0, 3.0, 0.0], n=2000, allowed_token_ids=[0, 2, 3])
    assert set(drawn) == {0, 2, 3} and drawn[2] > 1500
    # Logprobs stay the model's own (as logit_bias leaves them).
    req = make_req(temperature=0.0, allowed_token_ids=[2], return_logprob=True)
    got = Sampler(4, [EOS]).sample(logits[:1], [req])
    assert got.next_token_ids == [2]
    assert got.logprobs == pytest.approx([torch.log_softmax(logits[0], -1)[2].item()])


def test_an_allowed_list_is_made_a_mask_once() -> None:
    """The n samples and a draft's verifying rows share one list object: one mask for all;
    an equal list of another request gets its own (an entry is keyed by the object)."""
    from radixrt.executor.penalties import _allowed_mask

    ids = [3, 1, 7, 99]  # 99: past this vocabulary (ids are checked at admission)
    first = _allowed_mask(ids, 8, torch.device("cpu"))
    assert first.tolist() == [False, True, False, True, False, False, False, True]
    assert _allowed_mask(ids, 8, torch.device("cpu")) is first
    assert _allowed_mask(list(ids), 8, torch.device("cpu")) is not first


def test_min_new_tokens_blocks_eos_then_allows_it() -> None:
    logits = torch.tensor([[5.0, 1.0, 4.0, 0.0]])
    sampler = Sampler(4, [EOS])
    sp = dict(temperature=0.0, min_new_tokens=2, stop_token_ids=[2])
    assert sampler.sample(logits, [make_req(output_ids=[3], **sp)]).next_token_ids == [1]
    assert sampler.sample(logits, [make_req(output_ids=[3, 3], **sp)]).next_token_ids == [0]
    # Banning every token with finite logit would leave nothing: the row is left as it was.
    masked = torch.tensor([[5.0, -math.inf, 4.0, -math.inf]])
    assert sampler.sample(masked, [make_req(output_ids=[3], **sp)]).next_token_ids == [0]


def test_padded_vocab_columns_are_never_sampled() -> None:
    logits = torch.zeros(500, 6)
    logits[:, 4:] = 100.0
    out = Sampler(4, [EOS]).sample(logits, [make_req() for _ in range(500)])
    assert max(out.next_token_ids) < 4


def test_large_mixed_batch_respects_each_row() -> None:
    torch.manual_seed(6)
    logits = torch.randn(64, 50_000) * 3
    kinds = [dict(temperature=0.0), dict(), dict(top_k=40), dict(top_p=0.9), dict(min_p=0.2)]
    reqs = [make_req(**kinds[i % len(kinds)], seed=i if i % 2 else None) for i in range(64)]
    out = Sampler(50_000, [EOS]).sample(logits, reqs).next_token_ids
    probs = torch.softmax(logits, dim=-1)
    chosen = probs.gather(1, torch.tensor(out)[:, None])  # (64, 1)
    is_above = probs > chosen
    num_above, mass_above = is_above.sum(-1).tolist(), (probs * is_above).sum(-1).tolist()
    for i, kind in enumerate(kinds[i % len(kinds)] for i in range(64)):
        if "temperature" in kind:
            assert num_above[i] == 0
        if "top_k" in kind:
            assert num_above[i] < 40
        if "top_p" in kind:
            assert mass_above[i] < 0.9
        if "min_p" in kind:
            assert chosen[i] >= 0.2 * probs[i].max()


SEEDED_PARAMS = [
    dict(),
    dict(top_k=20, temperature=0.8),
    dict(top_p=0.9),
    dict(min_p=0.05, temperature=1.3),
    dict(top_k=50, top_p=0.8, min_p=0.01, frequency_penalty=0.3),
]


@pytest.mark.parametrize("sp", SEEDED_PARAMS)
def test_same_seed_same_tokens_in_any_batch(sp: dict) -> None:
    torch.manual_seed(4)
    steps = [torch.randn(1000) * 2 for _ in range(8)]
    alone, crowded = make_req(seed=7, **sp), make_req(seed=7, **sp)
    others = [
        make_req(),
        make_req(seed=8, top_k=100),
        make_req(temperature=0.0),
        make_req(top_p=0.5),
    ]
    sampler = Sampler(1000, [EOS])
    for logits in steps:
        a = sampler.sample(logits[None], [alone]).next_token_ids[0]
        batch = torch.stack([torch.randn(1000), logits, *[torch.randn(1000)] * 3])
        b = sampler.sample(batch, [others[0], crowded, *others[1:]]).next_token_ids[1]
        assert a == b
        alone.output_ids.append(a)
        crowded.output_ids.append(b)
    other_seed = make_req(seed=9, **sp)
    for logits in steps:
        other_seed.output_ids += sampler.sample(logits[None], [other_seed]).next_token_ids
    assert other_seed.output_ids != alone.output_ids


def test_logprobs_come_from_raw_logits() -> None:
    torch.manual_seed(5)
    logits = torch.randn(3, 40)
    reqs = [
        make_req(return_logprob=True, top_logprobs_num=5, temperature=0.5, repetition_penalty=2.0),
        make_req(),
        make_req(return_logprob=True, temperature=0.0, presence_penalty=1.0, output_ids=[3]),
    ]
    out = Sampler(40, [EOS]).sample(logits, reqs)
    ref = torch.log_softmax(logits, dim=-1)
    assert out.logprobs is not None and out.top_logprobs is not None
    for i in (0, 2):
        assert out.logprobs[i] == pytest.approx(ref[i, out.next_token_ids[i]].item(), abs=1e-5)
    assert math.isnan(out.logprobs[1])
    vals, ids = ref[0].topk(5)
    assert [t for _, t in out.top_logprobs[0]] == ids.tolist()
    assert [v for v, _ in out.top_logprobs[0]] == pytest.approx(vals.tolist(), abs=1e-5)
    assert out.top_logprobs[1] == [] and out.top_logprobs[2] == []


def allowed_tokens(logits: torch.Tensor, top_k: int, top_p: float, min_p: float) -> set[int]:
    """Reference filter by full sort: top_k, then top_p on the renormalized rest, then min_p."""
    probs, ids = torch.softmax(logits.double(), -1).sort(descending=True)
    if top_k > 0:
        probs, ids = probs[:top_k], ids[:top_k]
    probs = probs / probs.sum()
    keep = (probs.cumsum(0) - probs < top_p) & (probs >= min_p * probs[0])
    return set(ids[keep].tolist())


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    vocab=st.integers(2, 30),
    top_k=st.sampled_from([-1, 2, 5]),
    top_p=st.sampled_from([1.0, 0.9, 0.6, 0.3]),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_samples_stay_inside_reference_filter(
    seed: int, vocab: int, top_k: int, top_p: float, min_p: float
) -> None:
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * 2
    allowed = allowed_tokens(logits, top_k, top_p, min_p)
    counts = draw(logits.tolist(), n=300, top_k=top_k, top_p=top_p, min_p=min_p)
    assert set(counts) <= allowed


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.3, 1.0, 3.0, 8.0]),
    top_p=st.floats(0.05, 0.99),
)
def test_nucleus_threshold_is_the_smallest_set_reaching_top_p(
    seed: int, scale: float, top_p: float
) -> None:
    logits = torch.randn(4, 3000, generator=torch.Generator().manual_seed(seed)) * scale
    probs = torch.softmax(logits, dim=-1)
    cut = _nucleus_threshold(logits, probs, torch.full((4,), top_p))
    for row, threshold in zip(probs.double(), cut.tolist(), strict=True):
        kept = row[row >= threshold]
        # Up to float32 rounding: the kept set reaches top_p, and without its least likely
        # tokens (ties at the cut are all kept) it would not.
        assert kept.sum() >= top_p - 1e-5
        assert kept[kept > kept.min()].sum() < top_p + 1e-5
