"""CUDA-graph decode against eager decode on random-weight models (GPU, flashinfer)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks.fixtures.runner_driver import RunnerDriver
from radixrt.core import SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.executor.model_runner import ModelRunner
from tests.gpu import common as gb
from tests.gpu.shared_prefix import build_scheduler, run_to_completion

pytestmark = pytest.mark.gpu

# Small models with the head layouts the warm-up stage compiles: Llama-3-8B's and SmolLM2's.
ARCHS = {
    "llama8b_heads": dataclasses.replace(
        gb.LLAMA3_8B, hidden_size=1024, intermediate_size=2048, num_hidden_layers=2, vocab_size=4096
    ),
    "smollm2_heads": dataclasses.replace(gb.SMOLLM2_135M, num_hidden_layers=4, vocab_size=4096),
}
MAX_BS = 16


def _model(arch: object, std: float = 0.02) -> torch.nn.Module:
    torch.manual_seed(0)
    return gb.random_llama(arch, torch.device("cuda"), torch.bfloat16, 1024, std=std)


def _runner(model: torch.nn.Module, graphs: bool, page_size: int = 1) -> ModelRunner:
    cfg = ModelConfig(
        device="cuda",
        context_length=1024,
        attention_backend="flashinfer",
        disable_cuda_graph=not graphs,
        cuda_graph_max_bs=MAX_BS,
    )
    cache = CacheConfig(max_total_tokens=32768, page_size=page_size)
    return ModelRunner(cfg, cache, 24, model=model)


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize(
    ("arch", "page_size"),
    [(ARCHS["llama8b_heads"], 1), (ARCHS["smollm2_heads"], 1), (ARCHS["llama8b_heads"], 16)],
    ids=["llama8b_heads", "smollm2_heads", "llama8b_heads-page16"],
)
def test_graph_decode_logits_equal_eager(arch: object, page_size: int) -> None:
    pytest.importorskip("flashinfer")
    runner = _runner(_model(arch), graphs=True, page_size=page_size)
    graphs = runner.graph_runner
    assert graphs is not None and graphs.batch_sizes == [1, 2, 4, 8, 16]
    gen = torch.Generator().manual_seed(0)
    for b in (1, 3, 8, 13, 16, 17):  # 17 > MAX_BS: runs eagerly
        drv = RunnerDriver(runner)
        lens = torch.randint(1, 700, (b,), generator=gen).tolist()
        seqs = [drv.add(torch.randint(0, 4096, (n,), generator=gen).tolist()) for n in lens]
        logits = drv.forward(seqs)
        for _ in range(3):
            for s, tok in zip(seqs, logits.argmax(-1).tolist(), strict=True):
                s.ids.append(tok)
            fb = drv.build(seqs)
            assert graphs.can_run(fb) == (b <= MAX_BS)
            if b > MAX_BS:
                logits = runner.forward_batch(fb)
                continue
            replays = graphs.num_replays
            got = runner.forward_batch(fb)
            assert graphs.num_replays == replays + 1
            runner.attn_backend.init_forward_metadata(fb)  # eager, rewriting the same K/V
            logits = runner.model(fb)
            assert got.shape == logits.shape == (b, 4096)
            err = _rel_err(got, logits)
            assert err < 1e-2, (b, err)
            top2 = logits.topk(2).values  # (b, 2): rows with a clear winner must agree on it
            confident = top2[:, 0] - top2[:, 1] > 0.05
            assert torch.equal(got.argmax(-1)[confident], logits.argmax(-1)[confident])
        drv.reset()


def test_scheduler_greedy_with_graphs_equals_without() -> None:
    """The Engine's scheduler with CUDA graphs and with disable_cuda_graph: the same greedy
    tokens, except after a near-tie (bf16 rounding differs between the two paths)."""
    pytest.importorskip("flashinfer")
    model = _model(ARCHS["smollm2_heads"], std=0.05)
    gen = torch.Generator().manual_seed(3)
    system = torch.randint(0, 4096, (64,), generator=gen).tolist()
    prompts = [
        (system if i % 2 else []) + torch.randint(0, 4096, (n,), generator=gen).tolist()
        for i, n in enumerate((5, 40, 17, 300, 9, 64, 2, 33, 120, 11))
    ]
    params = SamplingParams(
        max_new_tokens=24, temperature=0.0, ignore_eos=True, return_logprob=True, top_logprobs_num=2
    )
    runs = []
    for graphs in (True, False):
        sched = build_scheduler(
            model,
            radix_cache=True,
            graphs=graphs,
            max_running_requests=16,
            max_total_tokens=16384,
            context_length=1024,
            cuda_graph_max_bs=8,
        )
        runs.append(run_to_completion(sched, prompts, params))
        graph_runner = sched.runner.graph_runner
        assert (graph_runner is not None and graph_runner.num_replays > 0) == graphs
    for with_graph, eager in zip(*runs, strict=True):
        a, b = with_graph.output_ids, eager.output_ids
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        for i in range(n):
            assert abs(with_graph.output_logprobs[i] - eager.output_logprobs[i]) < 0.05
        if n < len(a):  # they parted: it must be at a near-tie of the eager run
            (lp1, _), (lp2, _) = eager.output_top_logprobs[n]
            assert lp1 - lp2 < 0.1, (n, eager.output_top_logprobs[n])
