"""Gemma 3 270M served by name answers the OpenAI SDK: completions, and chat with and without a
system message (folded into the first user turn: Gemma has no system role)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from .server_proc import start_server


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(Path("gemma3-270m"), tmp_path_factory.mktemp("gemma3"))
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def test_completions_and_chat_through_the_openai_sdk(gemma_server) -> None:
    client = openai.OpenAI(base_url=gemma_server.url + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    assert model == "gemma3-270m"
    done = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert done.choices[0].text.startswith(" the capital of the country of France")
    for messages in (
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "system", "content": "Answer in one word."},
         {"role": "user", "content": "What is the capital of France?"}],
    ):  # fmt: skip
        chat = client.chat.completions.create(
            model=model, messages=messages, max_tokens=24, temperature=0
        )
        choice = chat.choices[0]
        assert choice.message.content and choice.finish_reason in ("stop", "length")
        assert "<end_of_turn>" not in choice.message.content
        assert chat.usage.prompt_tokens > 10
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
