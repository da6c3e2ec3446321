"""The turn after a forced call reads the call from the cache in the Anthropic and Gemini
dialects too (the OpenAI chat's: test_forced_call_cache.py): the pipeline keeps every
dialect's answered turn with its ids, so the call replayed as a tool_use block or a
functionCall part is not re-tokenized (the grammar's tokens of it are not the tokenizer's)."""

from __future__ import annotations

from typing import Any

import anthropic
from google import genai
from google.genai import types

from .test_tool_calls import ORDER, WEATHER

SCHEMAS = {"get_weather": WEATHER, "order_food": ORDER}  # the length-bounded ones


def _question(dialect: str) -> list[dict[str, str]]:
    """A question of each dialect's own, so no test reads another's turns from the cache."""
    text = f"What is the weather in Paris, and order me a tea? ({dialect})"
    return [{"role": "user", "content": text}]


def test_anthropic_tool_result_turn_reads_the_call_from_cache(api_server) -> None:
    client = anthropic.Anthropic(base_url=api_server.url, api_key="x", max_retries=0)
    tools = [{"name": n, "description": f"{n} tool", "input_schema": s} for n, s in SCHEMAS.items()]
    args: dict[str, Any] = {"model": "m", "max_tokens": 96, "tools": tools}
    args["extra_body"] = {"temperature": 0.0}
    choice = {"type": "tool", "name": "order_food"}
    question = _question("anthropic")
    first = client.messages.create(**args, messages=question, tool_choice=choice)
    assert first.stop_reason == "tool_use", first
    use = next(b for b in first.content if b.type == "tool_use")
    result = [{"type": "tool_result", "tool_use_id": use.id, "content": "ordered"}]
    turn = [*question, {"role": "assistant", "content": first.content},
            {"role": "user", "content": result}]  # fmt: skip
    second = client.messages.create(**args, messages=turn, tool_choice=choice)
    u = first.usage
    computed = u.input_tokens + (u.cache_read_input_tokens or 0) + u.output_tokens
    cached = second.usage.cache_read_input_tokens or 0
    # All of turn 1 (its output's every token: the grammar's spelling of the call, and its
    # forced tail computed before the request went to the cache).
    assert cached >= computed, (first.usage, second.usage)
    api_server.wait_idle_and_whole()


def test_gemini_function_response_turn_reads_the_call_from_cache(api_server) -> None:
    client = genai.Client(
        api_key="x", http_options=types.HttpOptions(base_url=api_server.url, api_version="v1beta")
    )
    decls = [
        types.FunctionDeclaration(name=n, description=f"{n} tool", parameters_json_schema=s)
        for n, s in SCHEMAS.items()
    ]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=decls)],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode="ANY", allowed_function_names=["order_food"]
            )
        ),
        max_output_tokens=96,
        temperature=0,
    )
    text = _question("gemini")[0]["content"]
    first = client.models.generate_content(model="m", contents=text, config=config)
    assert first.function_calls, first
    history = [
        types.Content(role="user", parts=[types.Part(text=text)]),
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="order_food", response={"ok": True})],
        ),
    ]
    second = client.models.generate_content(model="m", contents=history, config=config)
    u = first.usage_metadata
    computed = u.prompt_token_count + u.candidates_token_count
    cached = second.usage_metadata.cached_content_token_count or 0
    assert cached >= computed, (first.usage_metadata, second.usage_metadata)
    api_server.wait_idle_and_whole()
