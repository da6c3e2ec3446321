"""Draft trees on a tiny random Llama: continuations that diverge (decoy paths cached beside
the real answer, a prompt whose suffix went on differently before) verified in one pass,
greedy tokens identical to no speculation on the C kernels and on torch_native, a side branch
accepted, every node rejected, n > 1, an abort mid-tree, the pool whole after every step."""

from __future__ import annotations

import pytest
from test_speculative import _build, _check, _fresh, _prompt, _req, _run
from test_speculative_sampling import POSITIONS, _chi2_z, small_vocab_path  # noqa: F401
from test_speculative_sampling import _run as run_sampled

from radixrt.core import FinishKind, Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.speculative.drafter import LookupDrafter
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost
from radixrt.scheduler.speculative.tree import merge

TREE = {"speculative_tree_branches": 4, "speculative_tree_nodes": 12}
TORCH = {"attention_backend": "torch_native", "cpu_kernels": "off"}


def test_merge_lays_out_branches_depth_first() -> None:
    t = merge([[1, 2, 3], [1, 5], [7, 8], [1, 2, 9]], max_nodes=8, max_branches=3)
    assert t.tokens == [1, 2, 3, 5, 7, 8]  # [1, 2, 9] would be a fourth leaf
    assert t.parents == [0, 1, 2, 1, 0, 5] and t.depths == [1, 2, 3, 2, 1, 2]
    assert t.leaves() == [3, 4, 6] and t.branch_of() == [0, 0, 0, 0, 1, 2, 2]
    assert t.accept([1, 2, 4, 0, 0, 0, 0]) == [0, 1, 2]  # 1, 2 accepted; 3 is not 4
    assert t.accept([7, 0, 0, 0, 0, 8, 6]) == [0, 5, 6]  # the third branch, whole
    assert merge([[1, 2], [1, 2, 3]], 2, 4).is_chain  # the node budget cuts the second


def _trees_from_the_first_decode(s):
    """`s` drafting nothing in a prompt's own pass (a chain there would pass the decoys'
    branch point before the first tree): these tests place it at the first decode step. On
    the prior row cost, not this machine's measured one: the trees must be drafted however
    busy the machine is."""
    s.speculation.plan_prompt_ends = lambda ending, spare: 0
    s.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])
    return s


@pytest.fixture(scope="module")
def scheds(tiny_llama_path):
    return {
        "cpu": (_build(tiny_llama_path, 0),
                _trees_from_the_first_decode(_build(tiny_llama_path, 4, **TREE))),
        "torch_native": (_build(tiny_llama_path, 0, model=TORCH),
                         _trees_from_the_first_decode(
                             _build(tiny_llama_path, 4, model=TORCH, **TREE))),
    }  # fmt: skip


def _decoys(s, ids: list[int], answer: list[int], count: int, keep: int) -> None:
    """Cache `count` paths that follow ids + answer[:keep] differently from `answer`, each
    used after it (so the drafter's first branch is a decoy)."""
    for i in range(count):
        wrong = [(answer[keep] + 7 + 13 * i) % 40000 + 3] + _prompt(100 + i, 6)
        _run(s, [_req(f"decoy{i}", ids + answer[:keep] + wrong, 1)])


@pytest.mark.parametrize("backend", ["cpu", "torch_native"])
def test_side_branch_accepted_greedy_identical(scheds, backend: str) -> None:
    plain, tree = scheds[backend]
    _fresh(plain, tree)
    ids = _prompt(31, 20)
    ref = _run(plain, [_req("a", ids, 24)])["a"]
    _run(tree, [_req("warm", ids, 24)])  # the answer is a cached path ...
    _decoys(tree, ids, ref, 2, 1)  # ... and two decoys after its first token, newer
    steps, side = tree.stats.spec_tree_steps, tree.stats.spec_tree_side_accepts
    r = _req("b", ids, 24)
    assert _run(tree, [r])["b"] == ref
    assert tree.stats.spec_tree_steps > steps  # a tree was verified ...
    assert tree.stats.spec_tree_side_accepts > side  # ... and a branch past the first kept
    assert r.spec_accepted >= 12


def test_stop_token_inside_an_accepted_side_branch(scheds) -> None:
    plain, tree = scheds["cpu"]
    _fresh(plain, tree)
    ids = _prompt(37, 20)
    ref = _run(plain, [_req("a", ids, 24)])["a"]
    _run(tree, [_req("warm", ids, 24)])
    _decoys(tree, ids, ref, 2, 1)
    stop = ref[3]
    side = tree.stats.spec_tree_side_accepts
    r = _req("b", ids, 24, stop_token_ids=[stop])
    assert _run(tree, [r])["b"] == ref[: ref.index(stop) + 1]
    assert r.finish_reason.kind == FinishKind.STOP
    assert tree.stats.spec_tree_side_accepts > side


def test_own_tokens_branch_where_the_suffix_went_on_differently(scheds) -> None:
    """No cache help: the suffix's earlier occurrences went on differently (latest first)."""
    _, tree = scheds["cpu"]
    _fresh(tree)
    a, b, c, d = (_prompt(40 + i, 5) for i in range(4))
    drafter = LookupDrafter(tree.kv.cache, 4, branches=3)
    t = drafter.propose_tree(_req("a", a + b + a + c + a + d + a), 4, 12, 3)
    assert t.tokens == d[:4] + c[:4] + b[:4] and len(t.leaves()) == 3


def test_every_node_rejected(scheds) -> None:
    plain, tree = scheds["cpu"]
    _fresh(plain, tree)
    ids = _prompt(32, 20)
    ref = _run(plain, [_req("a", ids, 12)])["a"]
    _decoys(tree, ids, ref, 3, 1)  # only decoys after the first token
    r = _req("b", ids, 12)
    tree.add_request(r)
    tree.step()  # the prompt: the first token
    _check(tree)
    steps, accepted = tree.stats.spec_tree_steps, tree.stats.spec_accepted_tokens
    tree.step()  # verifies the decoys: none is the pick
    _check(tree)
    assert tree.stats.spec_tree_steps == steps + 1
    assert tree.stats.spec_accepted_tokens == accepted and r.output_ids == ref[:2]
    _run(tree, [])
    assert r.output_ids == ref


def test_n_greater_than_one_and_logprobs(scheds) -> None:
    plain, tree = scheds["cpu"]
    _fresh(plain, tree)
    ids = _prompt(33, 20)
    ref = _run(plain, [_req("a", ids, 24, return_logprob=True)])
    _run(tree, [_req("warm", ids, 24)])
    _decoys(tree, ids, ref["a"], 2, 2)
    reqs = [_req(f"n{i}", ids, 24, return_logprob=True) for i in range(3)]
    got = _run(tree, reqs)
    assert all(out == ref["a"] for out in got.values())
    assert all(len(r.output_logprobs) == 24 for r in reqs)


def test_abort_mid_tree(scheds) -> None:
    plain, tree = scheds["cpu"]
    _fresh(plain, tree)
    ids = _prompt(34, 20)
    ref = _run(plain, [_req("a", ids, 30)])["a"]
    _run(tree, [_req("warm", ids, 30)])
    _decoys(tree, ids, ref, 2, 3)
    a, b = _req("a", ids, 30), _req("b", _prompt(35, 12) * 3, 30)
    tree.add_request(a)
    tree.add_request(b)
    steps = tree.stats.spec_tree_steps
    for _ in range(30):  # until a tree is verified (the first decode step, here)
        tree.step()
        _check(tree)
        if tree.stats.spec_tree_steps > steps:
            break
    assert tree.stats.spec_tree_steps > steps and not a.is_finished
    free_rows = tree.kv.req_to_token_pool.num_free
    assert tree.abort("a") is a
    _check(tree)
    assert tree.kv.req_to_token_pool.num_free == free_rows + 1  # its row; none borrowed
    _run(tree, [])
    assert b.finish_reason.kind == FinishKind.LENGTH


def test_sampled_distribution_unchanged(small_vocab_path) -> None:  # noqa: F811
    """Temperature 1 on a 16-token vocabulary, a prompt whose suffix went on three ways:
    the emitted tokens' histograms as without speculation (chi-square)."""

    def build(k: int):
        model = ModelConfig(model_path=str(small_vocab_path), context_length=128, **TORCH)
        sched = SchedulerConfig(speculative_num_draft_tokens=k, max_running_requests=512, **TREE)
        return build_scheduler(model, CacheConfig(max_total_tokens=16384), sched)[0]

    prompt = [5, 6, 7, 8, 5, 6, 9, 10, 5, 6, 11, 12, 5, 6, 7, 8, 5, 6]
    sp = SamplingParams(max_new_tokens=POSITIONS, ignore_eos=True, temperature=1.0)
    plain, tree = build(0), build(4)
    tree.speculation.depths.cost = StepCost(fixed_k=1e6)  # rows free: 600 at once draft
    ref = run_sampled(plain, [Req(f"r{i}", list(prompt), sp) for i in range(600)])
    got = run_sampled(tree, [Req(f"r{i}", list(prompt), sp) for i in range(600)])
    assert tree.stats.spec_tree_steps > 100 and tree.stats.spec_tree_side_accepts > 10
    z = _chi2_z(ref, got)
    assert z < 4.0, z


def test_paged_pool_falls_back_to_chains(tiny_llama_path, scheds) -> None:
    """Pages of 4 slots: node slots could not move to other positions, so chains only."""
    plain = scheds["cpu"][0]
    _fresh(plain)
    paged = _build(tiny_llama_path, 4, page_size=4, **TREE)
    assert paged.speculation.branches == 1
    ids = _prompt(36, 20)
    ref = _run(plain, [_req("a", ids, 20)])["a"]
    _run(paged, [_req("warm", ids, 20)])
    _decoys(paged, ids, ref, 2, 1)
    r = _req("b", ids, 20)
    assert _run(paged, [r])["b"] == ref
    assert paged.stats.spec_tree_steps == 0 and r.spec_accepted > 0


@pytest.mark.parametrize("backend", ["cpu", "torch_native"])
def test_tree_beside_a_prefill(scheds, backend: str) -> None:
    """A tree verified in a pass that also prefills another request (tree nodes as the
    decode rows of an extend pass)."""
    plain, tree = scheds[backend]
    _fresh(plain, tree)
    ids, other = _prompt(38, 20), _prompt(39, 150)
    ref = _run(plain, [_req("a", ids, 24), _req("o", other, 8)])
    _run(tree, [_req("warm", ids, 24)])
    _decoys(tree, ids, ref["a"], 2, 1)
    a, o = _req("a", ids, 24), _req("o", other, 8)
    tree.add_request(a)
    tree.step()  # a's prompt
    steps = tree.stats.spec_tree_steps
    tree.add_request(o)
    tree.step()  # a's tree and o's prefill in one pass
    _check(tree)
    assert tree.stats.spec_tree_steps == steps + 1 and o.kv_len > 0
    while not tree.is_idle:
        tree.step()
        _check(tree)
    assert a.output_ids == ref["a"] and o.output_ids == ref["o"]
