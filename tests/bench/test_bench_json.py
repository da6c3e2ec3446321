"""`python -m benchmarks json` end to end at tiny sizes, on the tiny random
Llama."""

from __future__ import annotations

import json

from benchmarks.scenarios import json_bench


def test_json_bench_runs_every_pass(tiny_llama_path, tmp_path, capsys) -> None:
    out = tmp_path / "json.json"
    json_bench.main(
        [
            "--model-path",
            str(tiny_llama_path),
            "-n",
            "3",
            "--max-new-tokens",
            "48",
            "--max-total-tokens",
            "2048",
            "--backends",
            "llguidance",
            "outlines",
            "--schema",
            "open",
            "--json",
            str(out),
        ]
    )
    assert "| backend | jump-forward | budget masks |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    passes = data["passes"]
    assert [(p["backend"], p["jump_forward"], p["budget"]) for p in passes] == [
        (backend, jf, budget)
        for backend in ("llguidance", "outlines")
        for jf, budget in ((True, True), (False, True), (True, False))
    ]
    assert all(p["num_requests"] == 3 and p["output_tokens"] > 0 for p in passes)
    assert all(p["forced_tokens"] == 0 for p in passes if not p["jump_forward"])
    # A random model's strings never end on their own: only budget masks close the object.
    outlines = [p for p in passes if p["backend"] == "outlines"]
    assert [p["num_valid"] for p in outlines] == [3, 3, 0]
    assert set(data["compile"]) == {"llguidance", "outlines"}
