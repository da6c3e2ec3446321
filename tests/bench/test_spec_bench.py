"""`python -m benchmarks spec` end to end on the default model, briefly: every workload has
eight prompts, constrained ones compile and stay in their grammar, and the outputs with and
without speculation are the same (float32, as the tests run)."""

from __future__ import annotations

from benchmarks.scenarios import spec
from benchmarks.scenarios.spec_workloads import workloads


def test_workloads_are_eight_prompts_each(smollm2_path) -> None:
    from radixrt.model.families.loader import load_tokenizer

    loads = workloads(load_tokenizer(smollm2_path))
    assert set(loads) == {"a-json-extraction", "b-code-edit", "c-agent-tool-call", "d-chat",
                          "e-sampled-chat"}  # fmt: skip
    for name, (prompts, params) in loads.items():
        assert len(prompts) == 8 and len(set(prompts)) == 8
        assert params["temperature"] == 0 or (name == "e-sampled-chat" and "seed" in params)


def test_a_short_run_reports_ratios_and_identical_outputs(smollm2_path, capsys) -> None:
    args = ["--model-path", str(smollm2_path), "--runs", "1", "--streams", "8",
            "--max-new-tokens", "40", "--workloads", "c-agent-tool-call"]  # fmt: skip
    results = spec.main(args)
    assert set(results) == {"c-agent-tool-call/8"}
    for r in results.values():
        assert r["identical"] and r["plain_tok_s"] > 0 and r["ratio"] > 0
        assert r["accepted"] <= r["drafted"]
    assert "c-agent-tool-call" in capsys.readouterr().out
