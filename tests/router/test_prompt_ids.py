"""The router's prompt ids (for --kv-events routing) are the ids a worker computes."""

from __future__ import annotations

from pathlib import Path

from radixrt.serve.router.prompt_ids import PromptTokenizer


def test_chat_roles_are_templated_as_the_workers_do(tiny_llama_path: Path) -> None:
    tok = PromptTokenizer(str(tiny_llama_path))
    ask = {"role": "user", "content": "Hi"}

    def ids(role: str) -> list[int]:
        body = {"messages": [{"role": role, "content": "Be brief."}, ask]}
        return tok.ids("/v1/chat/completions", body)

    assert ids("developer") == ids("system") != []
