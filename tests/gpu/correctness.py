"""gpu_check's correctness stage: attention backends and CUDA graphs against a float32 reference.

One batch runs through ModelRunner in each configuration on the same random weights: a seed
request whose prompt starts with a shared prefix, then a mixed step where it decodes while
two prompts reuse its cached prefix (prefix_len > 0), two fresh prompts prefill, and then
decode steps of all five (a batch of 5: graphs replay size 8 with 3 padding rows). The float32
torch_native run is the reference; every other configuration is teacher-forced with the
reference's greedy tokens, so logits compare step by step, and runs free for greedy agreement.
"""

from __future__ import annotations

import copy
import dataclasses
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.fixtures.runner_driver import RunnerDriver
from radixrt.core.config import CacheConfig, ModelConfig
from radixrt.executor.model_runner import ModelRunner

if TYPE_CHECKING:
    from tests.gpu.check import Check

# Row layout of the mixed step: (label, shared prefix length, new tokens).
PREFIX_LEN = 40
ROWS = (
    ("shared40+13", PREFIX_LEN, 13),
    ("shared24+5", 24, 5),
    ("fresh64", 0, 64),
    ("fresh9", 0, 9),
)
SEED_LABEL = "seed(decode)"
SEED_OWN_LEN = 8
# Flag a configuration whose error exceeds this multiple of torch_native bf16's (and the floor).
MAX_ERR_RATIO = 2.0
ERR_FLOOR = 5e-3
MAX_ROW_ERR_RATIO = 3.0  # per request, where one row's noise varies more
ROW_ERR_FLOOR = 2e-2
_SHORT = {
    "torch_native_bf16": "tn",
    "flashinfer_bf16": "fi",
    "flashinfer_graph": "fi+graph",
    "triton_bf16": "tri",
    "triton_graph": "tri+graph",
}
# (eager configuration, its CUDA-graph twin) per backend that runs under graphs.
_GRAPH_PAIRS = (("flashinfer_bf16", "flashinfer_graph"), ("triton_bf16", "triton_graph"))


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A random-weight model: N(0, std) weights; with `logit_std`, an untied LM head scaled so
    the logits have that std (peaked: a top token of p ~ 0.1-0.6 over a 50k vocab)."""

    arch: Any  # ArchConfig
    std: float
    logit_std: float | None


def model_specs(dry_run: bool) -> dict[str, ModelSpec]:
    """std 0.02 keeps bf16 noise near 1e-2 over 30 layers (0.08 makes the random net chaotic:
    ~1e-1 relative error in bf16 against float32 on CPU); the std-0.08 SmolLM2 is the regime of
    the first GPU run, kept to tell backend error from bf16 noise there."""
    from tests.gpu import common as gb

    if dry_run:
        return {"tiny": ModelSpec(gb.TINY_LLAMA, 0.08, 4.0)}
    return {
        "smollm2": ModelSpec(gb.SMOLLM2_135M, 0.02, 4.0),
        "llama3_8b_2layer": ModelSpec(
            dataclasses.replace(gb.LLAMA3_8B, num_hidden_layers=2), 0.02, 4.0
        ),
        "smollm2_std0.08": ModelSpec(gb.SMOLLM2_135M, 0.08, None),
    }


@dataclass(slots=True)
class RunOutput:
    """One configuration's run: greedy tokens per row and, per step, (B, vocab) logits."""

    seed_token: int  # the seed request's first token, sampled after its prefill
    tokens: list[list[int]]
    logits: list[torch.Tensor] = field(default_factory=list)


def run_scenario(
    runner: ModelRunner, prompts: dict[str, list[int]], num_tokens: int, forced: RunOutput | None
) -> RunOutput:
    """The seed prefill, the mixed step, then decode steps, until each row has num_tokens
    greedy tokens from the mixed step on; with `forced`, its tokens are fed instead."""
    drv = RunnerDriver(runner)
    seed = drv.add(prompts[SEED_LABEL])
    seed_token = int(drv.forward([seed])[0].argmax())
    seed.ids.append(forced.seed_token if forced else seed_token)
    rows = [drv.add(prompts[label], seed, shared) for label, shared, _ in ROWS] + [seed]
    out = RunOutput(seed_token, [[] for _ in rows])
    for step in range(num_tokens):
        logits = drv.forward(rows)
        out.logits.append(logits)
        greedy = logits.argmax(-1).tolist()
        for i, seq in enumerate(rows):
            out.tokens[i].append(greedy[i])
            seq.ids.append(forced.tokens[i][step] if forced else greedy[i])
    drv.reset()
    return out


def make_prompts(vocab_size: int, seed: int = 0) -> dict[str, list[int]]:
    gen = torch.Generator().manual_seed(seed)

    def rand(n: int) -> list[int]:
        return torch.randint(0, vocab_size, (n,), generator=gen).tolist()

    prefix = rand(PREFIX_LEN)
    prompts = {SEED_LABEL: prefix + rand(SEED_OWN_LEN)}
    for label, shared, new in ROWS:
        prompts[label] = prefix[:shared] + rand(new)
    return prompts


def compare(ref: RunOutput, forced: RunOutput, free: RunOutput) -> dict[str, Any]:
    """Per row: first-step and decode-step relative logits errors, greedy agreement."""
    labels = [label for label, _, _ in ROWS] + [SEED_LABEL]
    first = _rel_err_rows(forced.logits[0], ref.logits[0])
    steps = torch.stack([_rel_err_rows(g, w) for g, w in zip(forced.logits[1:], ref.logits[1:])])
    return {
        "first_step_err": _total_err(forced.logits[0], ref.logits[0]),
        "decode_err": float(
            torch.tensor(
                [_total_err(g, w) for g, w in zip(forced.logits[1:], ref.logits[1:])]
            ).mean()
        ),
        "rows": {
            label: {
                "first_step_err": float(first[i]),
                "decode_err_mean": float(steps[:, i].mean()) if len(steps) else 0.0,
                "decode_err_max": float(steps[:, i].max()) if len(steps) else 0.0,
                "argmax_agree_forced": sum(
                    a == b for a, b in zip(forced.tokens[i], ref.tokens[i], strict=True)
                ),
                "greedy_common_prefix": _common_prefix(
                    _with_seed(free, i, len(labels)), _with_seed(ref, i, len(labels))
                ),
            }
            for i, label in enumerate(labels)
        },
    }


def stage_correctness(c: Check, d: dict[str, Any]) -> str:
    """Random SmolLM2 and 2-layer Llama-3-8B shapes; flag flashinfer or triton (or graphs) if
    their error against float32 is over twice torch_native bf16's."""
    from tests.gpu.model_stages import free_memory

    if c.dry_run:
        device, num_tokens = torch.device("cpu"), 6
    else:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        device, num_tokens = torch.device("cuda"), 32
    flags: list[str] = []
    parts: list[str] = []
    for name, spec in model_specs(c.dry_run).items():
        res = _check_model(c, name, spec, device, num_tokens)
        d[name] = res
        flags += [f"{name}: {f}" for f in res["flags"]]
        cfg = res["configs"]
        parts.append(
            f"{name} "
            + " ".join(
                f"{_SHORT[k]} {v['first_step_err']:.1e}/{v['decode_err']:.1e}"
                for k, v in cfg.items()
            )
        )
        free_memory()
    d["flags"] = flags
    d["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    summary = "rel err vs fp32, first step/decode: " + "; ".join(parts)
    if flags:
        raise AssertionError("; ".join(flags) + " || " + summary)
    return summary


# ---- helpers ----------------------------------------------------------------------------


def _check_model(
    c: Check, name: str, spec: ModelSpec, device: torch.device, num_tokens: int
) -> dict[str, Any]:
    from tests.gpu import common as gb

    torch.manual_seed(0)
    arch = spec.arch
    if spec.logit_std is not None:
        arch = dataclasses.replace(arch, tie_word_embeddings=False)
    model = gb.random_llama(arch, device, torch.bfloat16, max_position=512, std=spec.std)
    if spec.logit_std is not None:
        with torch.no_grad():  # normed hidden states have unit RMS: logits std = w std * sqrt(h)
            model.lm_head.weight.normal_(0.0, spec.logit_std / arch.hidden_size**0.5)
    ref_model = copy.deepcopy(model).float()  # the same (rounded) weights, computed in fp32
    prompts = make_prompts(arch.vocab_size)
    ref = run_scenario(_runner(ref_model, "torch_native", False), prompts, num_tokens, None)
    del ref_model
    configs = {"torch_native_bf16": ("torch_native", False)}
    if device.type == "cuda":  # the dry run has torch_native bf16 on CPU only
        configs["flashinfer_bf16"] = ("flashinfer", False)
        configs["flashinfer_graph"] = ("flashinfer", True)
        configs["triton_bf16"] = ("triton", False)
        configs["triton_graph"] = ("triton", True)
    out: dict[str, Any] = {"configs": {}, "ref_tokens": ref.tokens}
    forced_runs: dict[str, RunOutput] = {}
    errors: list[str] = []
    for label, (backend, graphs) in configs.items():
        try:
            runner = _runner(model, backend, graphs)
            forced = run_scenario(runner, prompts, num_tokens, ref)
            free = run_scenario(runner, prompts, num_tokens, None)
        except Exception as e:  # one broken configuration must not hide the others' figures
            c.log(traceback.format_exc())
            errors.append(f"{label} failed: {type(e).__name__}: {e}")
            continue
        forced_runs[label] = forced
        res = out["configs"][label] = compare(ref, forced, free)
        res["graph_replays"] = runner.graph_runner.num_replays if runner.graph_runner else 0
        c.log(f"  {name} {label}: " + _fmt(res))
        del runner
    out["flags"] = errors + _flags(out["configs"])
    for eager, graph in _GRAPH_PAIRS:  # the same kernels but padding/splits
        if not {eager, graph} <= set(forced_runs):
            continue
        pairs = zip(forced_runs[graph].logits[1:], forced_runs[eager].logits[1:], strict=True)
        worst = max((_total_err(a, b) for a, b in pairs), default=0.0)
        backend = eager.removesuffix("_bf16")
        key = "graph_vs_eager_decode_err_max" + ("" if backend == "flashinfer" else f"_{backend}")
        out[key] = worst
        c.log(f"  {name} graph vs eager {backend}, decode logits: max rel err {worst:.2e}")
        if out["configs"][graph]["graph_replays"] == 0:
            out["flags"].append(f"{graph} never replayed a CUDA graph")
    return out


def _runner(model: Any, backend: str, graphs: bool) -> ModelRunner:
    device = next(model.parameters()).device
    cfg = ModelConfig(
        device=device.type,
        context_length=512,
        attention_backend=backend,
        disable_cuda_graph=not graphs,
        cuda_graph_max_bs=8,
    )
    # 8 rows: graphs of sizes 1, 2, 4, 8, so the 5-row decode batch replays with 3 padding rows.
    return ModelRunner(cfg, CacheConfig(max_total_tokens=2048), 8, model=model)


def _flags(cfgs: dict[str, dict[str, Any]]) -> list[str]:
    """Errors over MAX_ERR_RATIO x the baseline's (and ERR_FLOOR): flashinfer and triton
    against torch_native bf16, graphs against their eager backend."""
    pairs = [
        ("flashinfer_bf16", "torch_native_bf16"),
        ("flashinfer_graph", "flashinfer_bf16"),
        ("triton_bf16", "torch_native_bf16"),
        ("triton_graph", "triton_bf16"),
    ]
    flags = []
    for got, base in pairs:
        if got not in cfgs or base not in cfgs:
            continue
        for key in ("first_step_err", "decode_err"):
            g, b = cfgs[got][key], cfgs[base][key]
            if g > MAX_ERR_RATIO * b and g > ERR_FLOOR:
                flags.append(f"{got} {key} {g:.2e} > {MAX_ERR_RATIO:g}x {base}'s {b:.2e}")
        for row, r in cfgs[got]["rows"].items():  # a bug in one kind of row only
            for key in ("first_step_err", "decode_err_mean"):
                g, b = r[key], cfgs[base]["rows"][row][key]
                if g > MAX_ROW_ERR_RATIO * b and g > ROW_ERR_FLOOR:
                    flags.append(f"{got} {row} {key} {g:.2e} vs {base}'s {b:.2e}")
    return flags


def _with_seed(run: RunOutput, i: int, num_rows: int) -> list[int]:
    """Row i's greedy tokens; the seed row's start with the token sampled after its prefill."""
    return [run.seed_token, *run.tokens[i]] if i == num_rows - 1 else run.tokens[i]


def _rel_err_rows(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    return (got.float() - want.float()).norm(dim=-1) / want.float().norm(dim=-1)


def _total_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _fmt(res: dict[str, Any]) -> str:
    rows = res["rows"]
    return (
        f"first-step err {res['first_step_err']:.2e}, decode err {res['decode_err']:.2e}; "
        "per row first/decode-mean/decode-max err, forced argmax agree, greedy prefix: "
        + "; ".join(
            f"{k} {r['first_step_err']:.1e}/{r['decode_err_mean']:.1e}/{r['decode_err_max']:.1e} "
            f"{r['argmax_agree_forced']} {r['greedy_common_prefix']}"
            for k, r in rows.items()
        )
    )
