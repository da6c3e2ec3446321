"""CUDA-graph plumbing that runs without a GPU: batch sizes, which backends qualify, the CPU
path staying graph-free, and the in-memory model hook the GPU checks build on."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import torch

from benchmarks.fixtures.runner_driver import RunnerDriver
from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.core.forward_batch import ForwardBatch
from radixrt.executor.cuda_graph import (
    CudaGraphRunner,
    GraphAttnBackend,
    capture_batch_sizes,
    capture_decode_graphs,
)
from radixrt.executor.model_runner import ModelRunner
from radixrt.model.attention.torch_native import TorchNativeAttnBackend
from tests.gpu import common as gb
from tests.gpu.shared_prefix import build_scheduler, greedy, run_to_completion


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return gb.random_llama(gb.TINY_LLAMA, torch.device("cpu"), torch.float32, 256, std=0.08)


def test_capture_batch_sizes() -> None:
    assert capture_batch_sizes(1) == [1]
    assert capture_batch_sizes(5) == [1, 2, 4, 5]
    assert capture_batch_sizes(32) == [1, 2, 4, 8, 16, 24, 32]
    assert capture_batch_sizes(36) == [1, 2, 4, 8, 16, 24, 32, 36]


def test_only_flashinfer_implements_the_graph_protocol() -> None:
    from radixrt.model.attention.flashinfer_backend import FlashInferAttnBackend

    assert issubclass(FlashInferAttnBackend, GraphAttnBackend)
    assert not issubclass(TorchNativeAttnBackend, GraphAttnBackend)
    pools = gb.SyntheticPools(
        num_layers=1,
        num_kv_heads=2,
        head_dim=16,
        capacity=8,
        max_reqs=2,
        max_context_len=8,
        dtype=torch.float32,
        device="cpu",
    )
    with pytest.raises(TypeError, match="CUDA graphs"):
        CudaGraphRunner(_model(), TorchNativeAttnBackend(), pools.req_to_token, pools.kv, [1])


def test_config_fields_and_validation() -> None:
    cfg = ModelConfig()
    assert cfg.disable_cuda_graph is False and cfg.cuda_graph_max_bs >= 32
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        ModelConfig(cuda_graph_max_bs=0)


def test_cpu_runner_has_no_graphs_and_the_given_model_runs() -> None:
    model = _model()
    runner = ModelRunner(
        ModelConfig(device="cpu", context_length=128),
        CacheConfig(max_total_tokens=256),
        4,
        model=model,
    )
    assert runner.graph_runner is None and runner.model is model
    assert runner.dtype == torch.float32 and runner.arch is gb.TINY_LLAMA
    drv = RunnerDriver(runner)
    a, b = drv.add([1, 2, 3, 4, 5]), drv.add([7, 8])
    first = drv.forward([a, b])
    a.ids.append(int(first[0].argmax()))
    b.ids.append(int(first[1].argmax()))
    fb = drv.build([a, b])
    assert fb.mode.value == "decode"
    assert runner.forward_batch(fb).shape == (2, gb.TINY_LLAMA.vocab_size)


def test_given_model_must_carry_an_arch_config() -> None:
    with pytest.raises(ValueError, match="ArchConfig"):
        ModelRunner(
            ModelConfig(device="cpu"),
            CacheConfig(max_total_tokens=64),
            2,
            model=torch.nn.Linear(2, 2),
        )


def test_scheduler_around_an_in_memory_model_cache_on_equals_off() -> None:
    gen = torch.Generator().manual_seed(1)
    system = torch.randint(0, 512, (40,), generator=gen).tolist()
    prompts = [system + torch.randint(0, 512, (n,), generator=gen).tolist() for n in (3, 9, 5)]
    outs = []
    for radix in (True, False):
        sched = build_scheduler(
            _model(),  # each runner its own: the CPU kernels' swap changes a model in place
            radix_cache=radix,
            graphs=False,
            max_running_requests=4,
            max_total_tokens=512,
            context_length=128,
        )
        reqs = run_to_completion(sched, prompts, greedy(6))
        assert all(len(r.output_ids) == 6 for r in reqs)
        assert (sched.stats.hit_rate > 0) == radix
        outs.append([r.output_ids for r in reqs])
    assert outs[0] == outs[1]


def test_import_radixrt_does_not_import_torch() -> None:
    code = "import sys, radixrt; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the replay logic on CPU, with torch.cuda's graph API faked --------------------------


class _FakeStream:
    def wait_stream(self, other: object) -> None:
        pass


class _FakeGraph:
    """Replays by re-running the captured call eagerly into the captured output tensor."""

    def __init__(self) -> None:
        self.replay_fn: Callable[[], object] | None = None

    def replay(self) -> None:
        assert self.replay_fn is not None
        self.replay_fn()


class _RecordingModel:
    """Wraps the model; remembers the last call so the fake capture can replay it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.last: tuple[ForwardBatch, torch.Tensor] | None = None

    def __call__(self, fb: ForwardBatch) -> torch.Tensor:
        out = self.model(fb)
        self.last = (fb, out)
        return out


class _FakeGraphBackend(TorchNativeAttnBackend):
    """torch_native planned the way a graph backend is: padded rows attend slot 0's row."""

    def init_cuda_graph_state(self, max_bs: int, max_num_indices: int) -> None:
        self.max_bs = max_bs

    def init_forward_metadata_capture(self, fb: ForwardBatch) -> None:
        self.init_forward_metadata(self._padded(fb, fb.batch_size))

    def init_forward_metadata_replay(self, fb: ForwardBatch, bs: int) -> None:
        assert fb.mode.value == "decode" and fb.batch_size <= bs <= self.max_bs
        self.init_forward_metadata(self._padded(fb, bs))

    def _padded(self, fb: ForwardBatch, bs: int) -> ForwardBatch:
        pad = bs - fb.batch_size
        return ForwardBatch.build(
            input_ids=[0] * bs,
            out_loc=torch.cat([fb.out_loc, torch.zeros(pad, dtype=torch.int64)]),
            req_pool_indices=fb.req_pool_indices.tolist() + [0] * pad,
            prefix_lens=[max(p, 1) for p in fb.extend_prefix_lens_cpu] + [1] * pad,
            extend_lens=[1] * bs,
            logits_indices=list(range(bs)),
            req_to_token_pool=fb.req_to_token_pool,
            token_to_kv_pool=fb.token_to_kv_pool,
            attn_backend=self,
            device=fb.out_loc.device,
        )


@pytest.fixture
def fake_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> _RecordingModel:
    recorder = _RecordingModel(_model())

    @contextlib.contextmanager
    def graph(g: _FakeGraph, pool: object = None, stream: object = None) -> Iterator[None]:
        recorder.last = None
        yield
        assert recorder.last is not None, "nothing captured"
        fb, out = recorder.last

        def replay() -> None:
            with torch.inference_mode():  # the captured output is an inference tensor
                out.copy_(recorder.model(fb))

        g.replay_fn = replay

    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a: _FakeStream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return recorder


def _with_fake_graphs(runner: ModelRunner, recorder: _RecordingModel, max_bs: int) -> None:
    backend = _FakeGraphBackend()
    runner.attn_backend = backend
    runner.graph_runner = CudaGraphRunner(
        recorder,  # type: ignore[arg-type]
        backend,
        runner.req_to_token_pool,
        runner.token_to_kv_pool,
        capture_batch_sizes(max_bs),
    )


def test_replay_pads_copies_inputs_and_returns_the_real_rows(
    fake_cuda_graphs: _RecordingModel,
) -> None:
    model = fake_cuda_graphs.model
    runner = ModelRunner(
        # torch ops: the fake graph backend stands in for the attention, which a fused
        # decode layer (the kernels' plan, timed per machine) would bypass
        ModelConfig(device="cpu", context_length=256, cpu_kernels="off"),
        CacheConfig(max_total_tokens=2048),
        8,
        model=model,
    )
    _with_fake_graphs(runner, fake_cuda_graphs, max_bs=8)
    graphs = runner.graph_runner
    assert graphs is not None and sorted(graphs.outputs) == [1, 2, 4, 8]
    gen = torch.Generator().manual_seed(0)
    for b in (1, 3, 5, 8):
        drv = RunnerDriver(runner)
        seqs = [
            drv.add(torch.randint(0, 512, (n,), generator=gen).tolist())
            for n in torch.randint(1, 60, (b,), generator=gen).tolist()
        ]
        logits = drv.forward(seqs)
        for _ in range(3):
            for s, tok in zip(seqs, logits.argmax(-1).tolist(), strict=True):
                s.ids.append(tok)
            fb = drv.build(seqs)
            replays = graphs.num_replays
            got = runner.forward_batch(fb)
            assert graphs.num_replays == replays + 1
            runner.attn_backend.init_forward_metadata(fb)
            logits = model(fb)
            torch.testing.assert_close(got, logits, rtol=1e-4, atol=1e-4)
        drv.reset()


def test_scheduler_with_fake_graphs_matches_eager(fake_cuda_graphs: _RecordingModel) -> None:
    model = fake_cuda_graphs.model
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (4, 30, 9, 17, 2)]
    outs = []
    for graphs in (True, False):
        sched = build_scheduler(
            model,
            radix_cache=True,
            graphs=False,
            max_running_requests=8,
            max_total_tokens=1024,
            context_length=128,
            cpu_kernels="off",  # as in the test above: no fused layer bypasses the fake backend
        )
        if graphs:
            _with_fake_graphs(sched.runner, fake_cuda_graphs, max_bs=8)
        reqs = run_to_completion(sched, prompts, greedy(8))
        if graphs:
            assert sched.runner.graph_runner is not None
            assert sched.runner.graph_runner.num_replays > 0
        outs.append([r.output_ids for r in reqs])
    assert outs[0] == outs[1]


def test_capture_decision_without_a_gpu() -> None:
    """Disabled, tensor-parallel or a backend that cannot run in a graph: no capture (and no
    CUDA call) at all."""
    on, off = ModelConfig(), ModelConfig(disable_cuda_graph=True)
    # The model and the pools (None) are never touched when nothing is captured.
    assert capture_decode_graphs(None, object(), None, None, off, 1, 8) is None
    assert capture_decode_graphs(None, object(), None, None, on, 2, 8) is None  # tp > 1
    assert capture_decode_graphs(None, object(), None, None, on, 1, 8) is None  # backend
