"""`radixrt run-batch`: a JSONL file of OpenAI batch requests over two endpoints answered by a
local server it starts and stops, written in input order (a failed line with its error); a
file that names no endpoint, or a flag the run owns, is refused before any server starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHAT = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3, "temperature": 0}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "radixrt.cli", "run-batch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_a_file_over_two_endpoints_is_answered_in_order(tiny_llama_path: Path, tmp_path) -> None:
    lines = [
        {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": CHAT},
        {"custom_id": "p1", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "Once upon", "max_tokens": 3, "temperature": 0}},
        {"custom_id": "c2", "method": "POST", "url": "/v1/chat/completions",
         "body": {**CHAT, "max_tokens": 2}},
        {"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [], "max_tokens": 3}},
    ]  # fmt: skip
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    done = _run("-i", str(src), "-o", str(out), "--model-path", str(tiny_llama_path),
                "--max-total-tokens", "2048")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["custom_id"] for r in results] == ["c1", "p1", "c2", "bad"]
    assert [r["response"]["status_code"] for r in results] == [200, 200, 200, 400]
    assert results[0]["response"]["body"]["object"] == "chat.completion"
    assert results[1]["response"]["body"]["object"] == "text_completion"
    assert results[2]["response"]["body"]["usage"]["completion_tokens"] <= 2
    assert "non-empty" in results[3]["response"]["body"]["error"]["message"]


def test_what_is_refused_before_a_server_starts(tmp_path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"custom_id": "a", "body": {}}\n')
    done = _run("-i", str(src), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1 and "line 1: no url" in done.stderr
    done = _run("-i", str(src), "-o", str(tmp_path / "out.jsonl"), "--port", "8000")
    assert done.returncode == 2 and "starts its own local server" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
