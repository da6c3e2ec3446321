"""`python -m radixrt.bench.serving.json_bench` end to end at tiny sizes, on the tiny random
Llama."""

from __future__ import annotations

import json

from radixrt.bench.serving import json_bench


def test_json_bench_runs_every_pass(tiny_llama_path, tmp_path, capsys) -> None:
    out = tmp_path / "json.json"
    json_bench.main(
        [
            "--model-path",
            str(tiny_llama_path),
            "-n",
            "3",
            "--max-new-tokens",
            "12",
            "--max-total-tokens",
            "2048",
            "--json",
            str(out),
        ]
    )
    assert "| backend | jump-forward |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    passes = data["passes"]
    assert [(p["backend"], p["jump_forward"]) for p in passes] == [
        ("llguidance", True),
        ("llguidance", False),
        ("outlines", True),
        ("outlines", False),
    ]
    assert all(p["num_requests"] == 3 and p["output_tokens"] > 0 for p in passes)
    assert all(p["forced_tokens"] == 0 for p in passes if not p["jump_forward"])
    assert set(data["compile"]) == {"llguidance", "outlines"}
