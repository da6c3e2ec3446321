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
    from radixrt.model.families.loader import load_tokenizer

    return load_tokenizer(smollm2_path).apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )


# Small limits so each bound is cheap to reach; the queue bound of 4 makes a wedged
# registration visible after a handful of requests.
TINY_FLAGS = (
    "--max-queued-requests",
    "4",
    "--context-length",
    "512",
    "--max-request-bytes",
    "1000000",
    "--max-prompts-per-request",
    "8",
    "--max-chat-messages",
    "16",
    "--max-stop-strings",
    "4",
    "--max-stop-string-len",
    "32",
    "--max-grammar-bytes",
    "4096",
    "--grammar-timeout-s",
    "5",
)


def _tiny_server(path: Path, tmp: Path):
    """A server on the tiny random Llama (SmolLM2's tokenizer) with TINY_FLAGS; at the end it
    must still serve, with the pool whole and nothing locked."""
    server = start_server(path, tmp, *TINY_FLAGS)
    try:
        yield server
        server.assert_serving()
        assert server.proc.poll() is None, "the server died during the tests"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tiny_server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny server the robustness and fuzz tests share."""
    yield from _tiny_server(tiny_llama_path, tmp_path_factory.mktemp("tiny_server"))


@pytest.fixture(scope="module")
def own_tiny_server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """A tiny server of one module's own, for tests whose answers follow what the server has
    measured (pass times), which the other modules' traffic on the shared one moves."""
    yield from _tiny_server(tiny_llama_path, tmp_path_factory.mktemp("own_tiny_server"))
