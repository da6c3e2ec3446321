"""Fixtures: a real SmolLM2 server per session or module, always killed at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from .server_proc import start_server


@pytest.fixture(scope="session")
def api_server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """One shared server for the API and bad-input tests; the pool must be whole at the end."""
    server = start_server(smollm2_path, tmp_path_factory.mktemp("api_server"), "--enable-metrics")
    try:
        yield server
        server.wait_idle_and_whole()
        assert server.proc.poll() is None, "the server died during the tests"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def chat_prompt(smollm2_path: Path) -> str:
    from radixrt.models.loader import load_tokenizer

    return load_tokenizer(smollm2_path).apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False,
        add_generation_prompt=True)
