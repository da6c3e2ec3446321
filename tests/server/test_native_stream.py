"""/generate's stream with logprobs: each event carries only the tokens and logprobs new since
the one before (its text stays whole), so a stream's bytes grow linearly with its tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from .server_proc import start_server

TOP = 100  # top_logprobs_num: each token carries 100 alternatives


@pytest.fixture(scope="module")
def server(tiny_llama_long_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = start_server(tiny_llama_long_path, tmp_path_factory.mktemp("native_stream"))
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _stream(server: Any, num_tokens: int) -> tuple[int, int, list[dict[str, Any]]]:
    """(bytes received, bytes of the events' text fields, the events)."""
    body = {
        "text": "Count:",
        "sampling_params": {"max_new_tokens": num_tokens, "ignore_eos": True, "temperature": 0},
        "stream": True,
        "return_logprob": True,
        "top_logprobs_num": TOP,
    }
    with httpx.stream("POST", server.url + "/generate", json=body, timeout=300) as r:
        assert r.status_code == 200
        raw = r.read()
    datas = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
    assert datas[-1] == b"[DONE]"
    events = [json.loads(d) for d in datas[:-1]]
    text_bytes = sum(len(json.dumps(e["text"], ensure_ascii=False).encode()) for e in events)
    return len(raw), text_bytes, events


def test_logprob_stream_bytes_grow_linearly(server: Any) -> None:
    short, short_text, _ = _stream(server, 150)
    total, text, events = _stream(server, 600)
    ids = [t for e in events for t in e["output_ids"]]
    assert len(ids) == 600 == events[-1]["meta_info"]["completion_tokens"]
    for e in events:  # only the new tokens, each with its own logprobs
        meta = e["meta_info"]
        assert [t for _, t, _ in meta["output_token_logprobs"]] == e["output_ids"]
        assert [len(top) for top in meta["output_top_logprobs"]] == [TOP] * len(e["output_ids"])
    texts = [e["text"] for e in events]  # the text stays cumulative
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    # Four times the tokens: four times the logprob bytes (every logprob sent again in every
    # event would be sixteen); the cumulative text is the only part that grows faster.
    assert total - text < 4.4 * (short - short_text)
    assert total < 10 * 2**20, total  # ~0.45 GB when each event resent every logprob so far
