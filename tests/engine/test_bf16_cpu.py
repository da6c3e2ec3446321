"""`dtype="bfloat16"` on the CPU with radixrt's kernels: every linear layer holds bfloat16
weights (packed for the kernel, or for torch's bfloat16 matmul per size as the guard plans),
activations, norms, attention and the KV cache stay float32. With every linear on the kernel
the model equals transformers in float32 on the same bf16-rounded weights (prompt logprobs,
greedy tokens and their logprobs), with the linears' inputs rounded too on AMX tiles; the
guard's own choice (torch's bfloat16 matmul also rounds the inputs) stays close; the default
model's perplexity stays within 1% of float32's. Without the kernels bfloat16 is a whole
bfloat16 model on torch ops."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hf_reference import hf_greedy_nocache, load_hf
from pool_checks import assert_pool_whole

from benchmarks.micro.perplexity import TEXT, perplexity
from radixrt import Engine
from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu.layers import PackedLinear
from radixrt.scheduler.process import ready_msg
from radixrt.serve.http.launch import dtypes_text

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

TOL = 2e-3  # nats: float32 arithmetic on the same rounded weights, another summation order
# AMX rounds every linear's input: a last-bit difference upstream can round an input to the
# neighbouring bfloat16 value (2^-8 apart), so the two sides drift a little more.
TOL_AMX = 1e-2
NEW = 8
THIRD_START = 30
PROMPTS = [
    [300 + (i * 7919) % 30000 for i in range(40)],
    [500 + (i * 104729) % 30000 for i in range(23)],
]


THIRD = PROMPTS[0][:30] + [77, 78]


def _hf_rounded(path: Path, round_inputs: bool = False):
    """transformers in float32 with every linear weight rounded to bfloat16 (a tied LM head
    gets its own rounded copy: the embedding table stays float32, as in radixrt), and with
    `round_inputs` every linear's input too (what AMX tiles multiply)."""
    hf = load_hf(path)
    for m in hf.modules():
        if isinstance(m, torch.nn.Linear):
            m.weight = torch.nn.Parameter(m.weight.detach().bfloat16().float())
            if round_inputs:
                m.register_forward_pre_hook(lambda _, args: (args[0].bfloat16().float(),))
    return hf


@torch.inference_mode()
def _hf_prompt_logprobs(hf, ids: list[int]) -> list[float]:
    lp = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)
    return [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def _generate(path: Path, cpu_kernels: str) -> tuple[list[dict], int, frozenset[str]]:
    params = {"temperature": 0, "max_new_tokens": NEW, "ignore_eos": True,
              "return_logprob": True, "logprob_start_len": 0}  # fmt: skip
    with Engine(str(path), max_total_tokens=2048, dtype="bfloat16", cpu_kernels=cpu_kernels,
                chunked_prefill_size=16) as e:  # fmt: skip
        runner = e.scheduler.runner
        assert runner.dtype == torch.float32 and runner.bf16_weights
        assert runner.token_to_kv_pool.get_kv_buffer(0)[0].dtype == torch.float32
        ready = ready_msg(runner)  # what the launch line and /get_server_info say
        assert (ready.dtype, ready.weight_dtype, ready.kv_dtype) == (
            "float32",
            "bfloat16",
            "float32",
        )
        assert dtypes_text(ready) == "weights bfloat16, activations float32, KV float32"
        linears = [m for m in runner.model.modules() if isinstance(m, PackedLinear)]
        assert linears and all(m.weights == "bfloat16" for m in linears)
        assert not any(type(m) is torch.nn.Linear for m in runner.model.modules())
        # what each size runs on: bfloat16 panels, or torch on the rounded weights (a bfloat16
        # copy where the variant multiplies bfloat16 pairs, else widened to float32)
        copy_dtype = torch.bfloat16 if ck.bf16_dot() else torch.float32
        for m in linears:
            panels = m.packed is not None and m.packed.dtype == torch.bfloat16
            copy = m.weight is not None and m.weight.dtype == copy_dtype
            assert panels == (m.small or m.large) and copy != (m.small and m.large)
            if copy:
                assert torch.equal(m.weight, m.weight.bfloat16().to(copy_dtype))
        if cpu_kernels == "on":
            assert all(type(m).__name__ == "FusedDecodeLayer" for m in runner.model.model.layers)
        outs = e.generate(input_ids=PROMPTS, sampling_params=params)
        # a cached prefix: the prompt logprobs from position 30 on
        later = {**params, "logprob_start_len": THIRD_START}
        outs.append(e.generate(input_ids=THIRD, sampling_params=later))
        assert outs[-1]["meta_info"]["cached_tokens"] >= 16
        assert_pool_whole(e)
        return outs, runner.weight_bytes, runner.cpu_kernels.kernels


@pytest.mark.parametrize("isa", cpu_build.supported_isas())
@pytest.mark.parametrize("fixture", ["tiny_llama_path", "tiny_qwen2_path"])
def test_bf16_weights_on_the_kernels_equal_transformers_on_rounded_weights(
    fixture: str, isa: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every variant this CPU runs: panels (float32 arithmetic on the rounded weights) or AMX
    tiles (inputs rounded to bfloat16 as well, float32 sums)."""
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    path = request.getfixturevalue(fixture)
    dot = isa in ck.BF16_DOT_ISAS  # x rounded to bfloat16 too
    hf = _hf_rounded(path, round_inputs=dot)
    tol = TOL_AMX if dot else TOL
    outs, _, _ = _generate(path, "on")
    for out, ids, start in zip(outs, [*PROMPTS, THIRD], [1, 1, THIRD_START]):
        got = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"]][-(len(ids) - start) :]
        assert got == pytest.approx(_hf_prompt_logprobs(hf, ids)[start - 1 :], abs=tol)
        tokens, logprobs = hf_greedy_nocache(hf, ids, NEW)
        assert out["output_ids"] == tokens
        got = [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]
        assert got == pytest.approx(logprobs, abs=tol)


WIDENING_ISAS = [isa for isa in cpu_build.supported_isas() if isa not in ck.BF16_DOT_ISAS]


@pytest.mark.parametrize("isa", WIDENING_ISAS)
def test_bf16_weights_with_prefill_on_torch_equal_transformers_on_rounded_weights(
    tiny_llama_path: Path, isa: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where the variant widens bfloat16 weights (avx512, avx2, portable), a plan that runs
    prefill-sized linears on torch gives torch the rounded weights in float32 (x not rounded,
    torch's float32 matmul, not its emulated bfloat16 one): the same arithmetic as the panels,
    so the model still equals transformers on the rounded weights."""
    from radixrt.model.cpu import guard

    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path))  # no kept plan: the fake timings rule

    def prefill_on_torch(shapes: object, ops: frozenset[str], decode_rows: int) -> dict:
        return {op: (2.0, 1.0) if op == "linear_prefill" else (1.0, 2.0) for op in ops}

    monkeypatch.setattr(guard, "time_ops", prefill_on_torch)
    hf = _hf_rounded(tiny_llama_path)
    outs, _, kernels = _generate(tiny_llama_path, "auto")
    assert "linear_decode" in kernels and "linear_prefill" not in kernels
    for out, ids, start in zip(outs, [*PROMPTS, THIRD], [1, 1, THIRD_START]):
        got = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"]][-(len(ids) - start) :]
        assert got == pytest.approx(_hf_prompt_logprobs(hf, ids)[start - 1 :], abs=TOL)
        tokens, logprobs = hf_greedy_nocache(hf, ids, NEW)
        assert out["output_ids"] == tokens


def test_bf16_weights_as_the_guard_plans_stay_close(tiny_llama_path: Path) -> None:
    """auto: on an AMX machine prefill-sized linears run torch's bfloat16 matmul, which rounds
    the activations too; the logprobs move by bf16's precision, no more."""
    hf = _hf_rounded(tiny_llama_path)
    outs, bf16_bytes, _ = _generate(tiny_llama_path, "auto")
    for out, ids in zip(outs[:2], PROMPTS):
        got = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"]][1:]
        want = _hf_prompt_logprobs(hf, ids)
        assert max(abs(a - b) for a, b in zip(got, want)) < 0.15
    with Engine(str(tiny_llama_path), max_total_tokens=2048) as e:
        assert bf16_bytes < 0.6 * e.scheduler.runner.weight_bytes


def test_bf16_without_kernels_is_a_bfloat16_torch_model(tiny_llama_path: Path) -> None:
    with Engine(str(tiny_llama_path), max_total_tokens=1024, dtype="bfloat16",
                cpu_kernels="off") as e:  # fmt: skip
        runner = e.scheduler.runner
        assert runner.dtype == torch.bfloat16 and not runner.bf16_weights
        assert dtypes_text(ready_msg(runner)) == "bfloat16"
        assert next(runner.model.parameters()).dtype == torch.bfloat16
        out = e.generate(input_ids=PROMPTS[0], sampling_params={"max_new_tokens": 4})
        assert len(out["output_ids"]) == 4
        assert_pool_whole(e)


def test_bf16_perplexity_within_one_percent_of_float32(smollm2_path: Path) -> None:
    text = TEXT.read_text()
    with Engine(str(smollm2_path), max_total_tokens=2048) as e:
        ppl_float, n = perplexity(e, text)
    with Engine(str(smollm2_path), max_total_tokens=2048, dtype="bfloat16") as e:
        ppl_bf16, n16 = perplexity(e, text)
        assert e.generate(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            {"max_new_tokens": 12, "temperature": 0},
        )["text"].startswith("The capital of France is Paris")
    assert n == n16 > 300
    assert ppl_bf16 <= ppl_float * 1.01, (ppl_bf16, ppl_float)


def test_auto_dtype_on_the_cpu(tiny_llama_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: bfloat16 weights on every vector variant of the kernels (bfloat16 products on
    amx and avx512bf16, widened in registers on avx512 and avx2), float32 on the portable one
    and under the pin (the test suite's); a bad pin is named."""
    from radixrt.core.config import ModelConfig
    from radixrt.model.cpu import build as cpu_build
    from radixrt.model.cpu.runtime import AUTO_DTYPE_ENV, bf16_on_kernels, native_bf16

    monkeypatch.delenv(AUTO_DTYPE_ENV)
    assert native_bf16() == ("avx512_bf16" in cpu_build.cpu_flags().split())
    assert bf16_on_kernels(ModelConfig()) == (ck.isa() != "portable")
    real_isa = ck.isa
    for isa, want in (("avx2", True), ("avx512", True), ("avx512bf16", True), ("portable", False)):
        monkeypatch.setattr(ck, "isa", lambda isa=isa: isa)
        assert bf16_on_kernels(ModelConfig()) == want
    monkeypatch.setattr(ck, "isa", real_isa)
    assert not bf16_on_kernels(ModelConfig(cpu_kernels="off"))
    assert not bf16_on_kernels(ModelConfig(quantization="int8"))
    monkeypatch.setenv(AUTO_DTYPE_ENV, "bfloat16")
    with Engine(str(tiny_llama_path), max_total_tokens=512) as e:
        assert e.scheduler.runner.bf16_weights and e.scheduler.runner.dtype == torch.float32
    monkeypatch.setenv(AUTO_DTYPE_ENV, "float32")
    assert not bf16_on_kernels(ModelConfig())
    assert bf16_on_kernels(ModelConfig(dtype="bfloat16"))
    monkeypatch.setenv(AUTO_DTYPE_ENV, "fp8")
    with pytest.raises(ValueError, match="RADIXRT_CPU_AUTO_DTYPE must be"):
        bf16_on_kernels(ModelConfig())
