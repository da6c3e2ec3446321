"""A verifying step (a request computing its last token and drafted ones) next to plain decode
rows runs as a decode pass, one row per token, on torch_native and on the CPU kernels (the
fused decode layers, each ISA variant, float32 and bfloat16 KV), with the logits the extend
path gives; a batch with a prefill in it, or a backend without such rows, stays an extend."""

from __future__ import annotations

import pytest
import torch
from cpu_variants import variants

from benchmarks.fixtures.runner_driver import RunnerDriver, Seq
from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.core.forward_batch import ForwardBatch, ForwardMode, split_short_extends
from radixrt.executor.model_runner import ModelRunner
from radixrt.model.cpu.fused_layer import FusedDecodeLayer
from tests.gpu import common as gb

_ISAS = variants()
# (attention backend, CPU kernels, ISA variant, KV dtype)
_CASES = [("torch_native", "off", None, "auto")] + [
    ("cpu", "on", isa, kv) for isa in _ISAS for kv in ("auto", "bfloat16")
]


def _runner(backend: str, kernels: str, kv: str) -> ModelRunner:
    torch.manual_seed(0)
    model = gb.random_llama(gb.TINY_LLAMA, torch.device("cpu"), torch.float32, 256, std=0.08)
    return ModelRunner(
        ModelConfig(device="cpu", context_length=256, attention_backend=backend,
                    cpu_kernels=kernels),
        CacheConfig(max_total_tokens=1024, kv_cache_dtype=kv),
        4,
        model=model,
    )  # fmt: skip


def _verify_batch(drv: RunnerDriver, seqs: list[Seq], new: list[list[int]]) -> ForwardBatch:
    """Each seq computes its `new` tokens (1: a decode; more: a token and its draft), with
    logits at every row, as the scheduler lays out a verifying step."""
    for s, ids in zip(seqs, new):
        s.ids += ids
    fb = drv.build(seqs)
    fb.logits_indices = torch.arange(fb.num_tokens, dtype=torch.int64)
    return fb


def _rewind(seqs: list[Seq], new: list[list[int]]) -> None:
    for s, ids in zip(seqs, new):
        del s.ids[len(s.ids) - len(ids) :]
        s.kv_len = len(s.ids)


@pytest.mark.parametrize(("backend", "kernels", "isa", "kv"), _CASES)
def test_verifying_rows_decode_with_the_extend_paths_logits(
    backend: str, kernels: str, isa: str | None, kv: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if isa is not None:
        monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    runner = _runner(backend, kernels, kv)
    if backend == "cpu":  # the fused decode layers are what a decode pass runs here
        assert all(isinstance(m, FusedDecodeLayer) for m in runner.model.model.layers)
    drv = RunnerDriver(runner)
    gen = torch.Generator().manual_seed(3)
    shared = torch.randint(3, 500, (80,), generator=gen).tolist()
    # a and c share 80 tokens (the kernels' shared-prefix path), b is alone.
    a = drv.add(shared + [5, 6, 7])
    drv.forward([a])
    b, c = drv.add([9, 8, 7, 6, 5, 4, 3]), drv.add(shared + [11], share=a, shared_len=80)
    drv.forward([b, c])
    seqs = [a, b, c]
    new = [[40, 41, 42, 43], [44], [45, 46, 47]]  # a: 1 + 3 drafted, b: a decode, c: 1 + 2

    fb = _verify_batch(drv, seqs, new)
    assert fb.mode is ForwardMode.DECODE and fb.batch_size == 8
    assert fb.seq_lens_cpu == [84, 85, 86, 87, 8, 82, 83, 84]
    rows = runner.forward_batch(fb)
    if backend == "cpu":
        assert runner.attn_backend.decode_batch  # type: ignore[attr-defined]

    _rewind(seqs, new)
    monkeypatch.setattr(runner.attn_backend, "decodes_request_rows", False)
    fb = _verify_batch(drv, seqs, new)
    assert fb.mode is ForwardMode.EXTEND and fb.batch_size == 3
    extend = runner.forward_batch(fb)

    atol = 2e-3 if kv == "auto" else 3e-2
    torch.testing.assert_close(rows, extend, rtol=1e-3, atol=atol)
    assert torch.equal(rows.argmax(-1), extend.argmax(-1))


def test_rows_equal_one_token_decode_steps() -> None:
    """Row j of a verification is the decode step after the first j drafted tokens."""
    runner = _runner("torch_native", "off", "auto")
    drv = RunnerDriver(runner)
    a = drv.add(list(range(3, 23)))
    drv.forward([a])
    draft = [30, 31, 32]
    fb = _verify_batch(drv, [a], [draft])
    assert fb.mode is ForwardMode.DECODE
    rows = runner.forward_batch(fb)
    _rewind([a], [draft])
    for j, token in enumerate(draft):
        a.ids.append(token)
        step = drv.build([a])
        assert step.mode is ForwardMode.DECODE and step.batch_size == 1
        torch.testing.assert_close(runner.forward_batch(step)[0], rows[j], rtol=1e-4, atol=1e-4)


def test_a_prefill_or_a_long_extend_keeps_the_extend_path() -> None:
    runner = _runner("torch_native", "off", "auto")
    drv = RunnerDriver(runner)
    a = drv.add(list(range(3, 13)))
    drv.forward([a])
    b = drv.add([7, 8, 9])  # a prefill: no cached prefix
    a.ids += [20, 21]
    assert drv.build([a, b]).mode is ForwardMode.EXTEND
    a.ids += list(range(40, 60))  # 20 tokens after a prefix: a chunk, not a draft
    assert drv.build([a]).mode is ForwardMode.EXTEND


def test_only_output_tokens_split_into_decode_rows() -> None:
    rows, prefix, extend, prompts = split_short_extends(
        [0, 1, 2, 3, 4], [10, 10, 0, 10, 10], [3, 3, 3, 1, 17], [0, 3, 0, 0, 0]
    )
    # 0: a draft of output tokens: rows; 1: a prompt's suffix; 2: no prefix; 3: a decode row;
    # 4: more than a decode pass's rows per request.
    assert rows == [0, 0, 0, 1, 2, 3, 4]
    assert prefix == [10, 11, 12, 10, 0, 10, 10]
    assert extend == [1, 1, 1, 3, 3, 1, 17]
    assert prompts == [False, False, False, True, False, False, False]


def test_a_prompt_end_and_its_draft_split_into_an_extend_and_decode_rows() -> None:
    rows, prefix, extend, prompts = split_short_extends(
        [0, 1, 2, 3], [10, 0, 10, 10], [5, 6, 20, 1], [2, 4, 2, 1]
    )
    # 0: 2 prompt tokens after a cached 10, then a 3-token draft; 1: a whole prompt of 4 and
    # a draft of 2; 2: 18 output tokens, more than a pass's decode rows: one extend; 3: the
    # prompt's last token alone.
    assert rows == [0, 0, 0, 0, 1, 1, 1, 2, 3]
    assert prefix == [10, 12, 13, 14, 0, 4, 5, 10, 10]
    assert extend == [2, 1, 1, 1, 4, 1, 1, 20, 1]
    assert prompts == [True, False, False, False, True, False, False, True, True]


# Every variant with kernels (the portable one leaves extends and GEMMs to torch), bfloat16
# KV on the amx and avx512bf16 ones taking the extend kernel of bfloat16 products.
@pytest.mark.parametrize(
    ("isa", "kv"),
    [(isa, kv) for isa in variants(bf16_linear=True) if isa != "portable"
     for kv in ("auto", "bfloat16")],
)  # fmt: skip
def test_a_prompt_computes_the_same_however_much_of_it_was_cached(
    isa: str, kv: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU kernels (a GEMM row does not depend on the call's other rows; torch's do), a
    prompt's last logits are bit for bit the same computed cold and after a cached prefix that
    leaves 1..16 of its tokens (which a decode pass could take as rows, with the decode
    kernel's rounding), its last token alone included; drafts beside them still decode as
    rows."""
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    runner = _runner("cpu", "on", kv)
    drv = RunnerDriver(runner)
    prompt = torch.randint(3, 500, (45,), generator=torch.Generator().manual_seed(5)).tolist()
    cold = drv.forward([drv.add(prompt)])
    for cached in (29, 37, 43, 44):
        drv.reset()
        head = drv.add(prompt[:cached])
        drv.forward([head])
        warm = drv.add(prompt, share=head, shared_len=cached)
        assert torch.equal(drv.forward([warm]), cold), cached
    drv.reset()
    a = drv.add(prompt[:30])
    drv.forward([a])
    a.ids += [40, 41, 42]  # output tokens: a verifying step's rows, beside a prompt's suffix
    head = drv.add(prompt[:40])
    drv.forward([head])
    warm = drv.add(prompt, share=head, shared_len=40)
    fb = drv.build([a, warm])
    assert fb.mode is ForwardMode.EXTEND
    assert fb.extend_seq_lens_cpu == [1, 1, 1, 5] and fb.seq_lens_cpu == [31, 32, 33, 45]
    fb.logits_indices = torch.tensor([7], dtype=torch.int64)
    assert torch.equal(runner.forward_batch(fb), cold)
