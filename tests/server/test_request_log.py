"""--request-log: one line per finished request without its text, salted chained prefix hashes
that match exactly where prompts share whole blocks, rotation by size, and `radixrt cost`
replaying a log a real server wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from radixrt.cli import main as cli_main
from radixrt.core import PinSpec, SamplingParams
from radixrt.core.config import ServerConfig
from radixrt.serve.http.request_log import BLOCK, RequestLog, open_request_log, prefix_hashes
from radixrt.serve.results.state import ReqOutput

from .server_proc import start_server


def test_hashes_chain_over_whole_blocks_and_depend_on_the_salt() -> None:
    a = list(range(3 * BLOCK + 5))
    b = a[: 2 * BLOCK] + [7] * (BLOCK + 5)
    ha, hb = prefix_hashes(a, b"s"), prefix_hashes(b, b"s")
    assert len(ha) == 3 and ha[:2] == hb[:2] and ha[2] != hb[2]
    assert prefix_hashes(a, b"t")[0] != ha[0]
    assert prefix_hashes(a[: BLOCK - 1], b"s") == []


def test_rotation_and_the_salt_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = RequestLog(str(path), max_bytes=600)
    req = ReqOutput("r", list(range(300)), SamplingParams(), 0.0, "tenant:a", "/generate",
                    [PinSpec(256, 300.0)])  # fmt: skip
    req.output_ids = [1, 2]
    for _ in range(4):
        log.observe_finished(req, 0.5)
    log.close()
    assert (tmp_path / "log.jsonl.1").exists()
    salt = (tmp_path / "log.jsonl.salt").read_text()
    again = RequestLog(str(path), max_bytes=600)
    assert again.salt.hex() == salt
    again.close()
    rec = json.loads((tmp_path / "log.jsonl.1").read_text().splitlines()[0])
    assert rec["tenant"] == "a" and rec["prompt_tokens"] == 300 and rec["output_tokens"] == 2
    assert rec["pins"] == [{"offset": 256, "ttl_s": 300.0, "sliding": True, "handle": False}]
    assert len(rec["prefix_hashes"]) == 2


def _req() -> ReqOutput:
    req = ReqOutput("r", list(range(300)), SamplingParams(), 0.0, "", "/generate")
    req.output_ids = [1]
    return req


@pytest.mark.parametrize("text", ["", "\n", "abc", "00ff"])
def test_a_salt_file_without_a_salt_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "log.jsonl.salt").write_text(text)
    config = ServerConfig(request_log=str(tmp_path / "log.jsonl"))
    with pytest.raises(ValueError, match="log.jsonl.salt holds no salt of at least 16 bytes"):
        open_request_log(config)


def test_a_partial_last_line_is_closed_before_the_next_record(tmp_path: Path, caplog) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"whole": 1}\n{"torn": "caf\xc3')  # a crash mid-write, mid-character
    with caplog.at_level("WARNING", logger="radixrt"):
        log = RequestLog(str(path), max_bytes=10**6)
    log.observe_finished(_req(), 0.5)
    log.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[:2] == [b'{"whole": 1}', b'{"torn": "caf\xc3'] and lines[3] == b""
    assert json.loads(lines[2])["prompt_tokens"] == 300
    assert "partial line" in caplog.text


def test_a_failed_rotation_keeps_logging_to_the_open_file(tmp_path: Path, caplog) -> None:
    path = tmp_path / "log.jsonl"
    (tmp_path / "log.jsonl.2").write_text("older\n")
    (tmp_path / "log.jsonl.3").mkdir()  # FILE.2 cannot take this name: the rotation fails
    (tmp_path / "log.jsonl.3" / "x").write_text("")
    log = RequestLog(str(path), max_bytes=300)
    with caplog.at_level("WARNING", logger="radixrt"):
        for _ in range(4):
            log.observe_finished(_req(), 0.5)
    assert len(path.read_text().splitlines()) == 4  # every line kept
    warnings = [r for r in caplog.records if "could not rotate" in r.getMessage()]
    assert len(warnings) == 1  # retried a minute later, not at every line
    (tmp_path / "log.jsonl.3" / "x").unlink()
    (tmp_path / "log.jsonl.3").rmdir()
    log._rotate_after = 0.0  # a minute later
    log.observe_finished(_req(), 0.5)
    log.close()
    assert len((tmp_path / "log.jsonl.1").read_text().splitlines()) == 5
    assert (tmp_path / "log.jsonl.3").read_text() == "older\n" and path.read_text() == ""


@pytest.fixture(scope="module")
def logged(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("request_log")
    server = start_server(tiny_llama_path, tmp, "--request-log", str(tmp / "requests.jsonl"))
    server.log_file = tmp / "requests.jsonl"
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def test_a_real_server_logs_and_cost_replays_it(logged: Any, capsys: Any) -> None:
    secret = "Zanzibar-quartz"  # must not appear in the log
    shared = f"{secret} is the shared instruction. " + "Keep every answer short. " * 80
    sp = {"max_new_tokens": 2, "temperature": 0}
    for i in range(3):
        r = logged.post(
            "/generate", json={"text": shared + f" Question {i}?", "sampling_params": sp}
        )
        assert r.status_code == 200, r.text
    r = httpx.post(
        logged.url + "/v1/completions",
        json={"model": "m", "prompt": shared, "max_tokens": 1, "prompt_cache_retention": "24h"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    logged.wait_idle_and_whole()
    text = logged.log_file.read_text()
    assert secret not in text and "shared instruction" not in text
    recs = [json.loads(line) for line in text.splitlines()]
    assert [r["endpoint"] for r in recs] == ["/generate"] * 3 + ["/v1/completions"]
    first, second = recs[0], recs[1]
    n = first["prompt_tokens"] // BLOCK
    assert n >= 2 and first["prefix_hashes"][: n - 1] == second["prefix_hashes"][: n - 1]
    assert second["cached_tokens"] > BLOCK and first["ttft_s"] is not None
    assert recs[3]["pins"] and recs[3]["pins"][0]["ttl_s"] == 86400.0
    try:
        rc = cli_main(["cost", "--request-log", str(logged.log_file)])
    except SystemExit as e:
        rc = e.code
    assert rc in (0, None)
    assert "anthropic" in capsys.readouterr().out.lower()
