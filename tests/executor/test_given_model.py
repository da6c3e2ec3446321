"""A model given to a second ModelRunner (benchmarks, the GPU check) whose layers the first
already swapped for radixrt's CPU kernels: same settings reuse the first plan, other settings
are refused rather than run fused layers under a backend that cannot feed them."""

from __future__ import annotations

import pytest
import torch

from radixrt.model.cpu import kernels as ck
from radixrt.scheduler.scheduler import Scheduler
from tests.gpu import common as gb
from tests.gpu.shared_prefix import build_scheduler, greedy, run_to_completion

pytestmark = pytest.mark.skipif(not ck.available(), reason="the CPU kernels do not build here")

CTX = 96


def _sched(model: torch.nn.Module, radix: bool, cpu_kernels: str = "auto") -> Scheduler:
    return build_scheduler(
        model, radix_cache=radix, graphs=False, max_running_requests=4,
        max_total_tokens=4 * CTX + 64, context_length=CTX, cpu_kernels=cpu_kernels,
    )  # fmt: skip


def test_second_runner_over_a_swapped_model_keeps_its_plan() -> None:
    model = gb.random_llama(gb.TINY_LLAMA, torch.device("cpu"), torch.float32, max_position=CTX)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, gb.TINY_LLAMA.vocab_size, (3, 40), generator=gen).tolist()
    first = _sched(model, radix=True)
    out_first = [r.output_ids for r in run_to_completion(first, prompts, greedy(6))]
    second = _sched(model, radix=False)
    assert second.runner.cpu_kernels == first.runner.cpu_kernels
    assert second.runner.attn_backend_name == first.runner.attn_backend_name
    out_second = [r.output_ids for r in run_to_completion(second, prompts, greedy(6))]
    assert out_second == out_first  # (run_to_completion checks each pool whole)


def test_other_kernel_settings_over_a_swapped_model_are_refused() -> None:
    model = gb.random_llama(gb.TINY_LLAMA, torch.device("cpu"), torch.float32, max_position=CTX)
    _sched(model, radix=True, cpu_kernels="on")
    for mode in ("off", "auto"):
        with pytest.raises(ValueError, match="freshly loaded model"):
            _sched(model, radix=True, cpu_kernels=mode)
