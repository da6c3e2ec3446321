"""One agent session of the agent benchmark: scripted turns (the same request bytes for every
engine), each a forced tool call (tool_choice "required" or one named tool) sent through
OpenAI chat completions, timed, its usage and its call's validity recorded."""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import jsonschema

from benchmarks.scenarios.agent.tools import DOMAINS, example_value, tool_result

SYSTEM = (
    "You are an operations agent. Work step by step: each step, call exactly one tool; its "
    "result comes back to you."
)


@dataclass(frozen=True, slots=True)
class Workload:
    sessions: int = 8
    turns: int = 10
    max_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0


@dataclass(slots=True)
class TurnRow:
    """One timed request: its session and turn, usage, and what its call was."""

    session: int
    turn: int
    choice: str  # "required" or the named tool
    seconds: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    failure: str | None  # None: a call that validates; else why not (see check_call)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def script(tools: list[dict[str, Any]], wl: Workload, session: int) -> list[dict[str, Any]]:
    """The session's turns: what each forces, and the call and result its history then holds
    (scripted, not the model's, so that every engine is sent the same requests)."""
    rng = random.Random(wl.seed * 1000 + session)
    turns = []
    for k in range(wl.turns):
        fn = rng.choice(tools)["function"]
        args = example_value(fn["parameters"], rng)
        turns.append(
            {
                "named": k % 2 == 1,  # even turns: "required" (any tool); odd: this tool
                "name": fn["name"],
                "arguments": json.dumps(args),
                "result": tool_result(fn["name"], args, rng),
            }
        )
    return turns


def first_messages(session: int) -> list[dict[str, Any]]:
    domain = DOMAINS[session % len(DOMAINS)].replace("_", " ")
    task = f"Session {session}: audit the {domain} records changed this week and fix problems."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def check_call(
    body: dict[str, Any], tools: dict[str, dict[str, Any]], named: str | None
) -> str | None:
    """Why the response's forced call is not a valid call (None when it is): no_call,
    wrong_name (not a tool, or not the named one), bad_json, schema."""
    calls = (body["choices"][0]["message"].get("tool_calls")) or []
    if not calls:
        return "no_call"
    fn = calls[0]["function"]
    if fn["name"] not in tools or (named is not None and fn["name"] != named):
        return "wrong_name"
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return "bad_json"
    try:
        jsonschema.validate(args, tools[fn["name"]]["parameters"])
    except jsonschema.ValidationError:
        return "schema"
    return None


async def run_session(
    client: httpx.AsyncClient,
    url: str,
    tools: list[dict[str, Any]],
    wl: Workload,
    session: int,
) -> list[TurnRow]:
    """Run the session's turns one after another; returns one row per turn."""
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    messages = first_messages(session)
    rows = []
    for k, turn in enumerate(script(tools, wl, session)):
        named = turn["name"] if turn["named"] else None
        choice: Any = {"type": "function", "function": {"name": named}} if named else "required"
        req = {
            "model": "default",
            "messages": messages,
            "tools": tools,
            "tool_choice": choice,
            "parallel_tool_calls": False,
            "max_tokens": wl.max_tokens,
            "temperature": wl.temperature,
            "seed": wl.seed,
        }
        t0 = time.perf_counter()
        resp = await client.post(url + "/v1/chat/completions", json=req)
        seconds = time.perf_counter() - t0
        if resp.status_code != 200:
            raise RuntimeError(f"session {session} turn {k}: {resp.status_code} {resp.text[:500]}")
        body = resp.json()
        usage = body.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        rows.append(
            TurnRow(
                session, k, named or "required", seconds, usage.get("prompt_tokens", 0),
                details.get("cached_tokens") or 0, usage.get("completion_tokens", 0),
                check_call(body, by_name, named),
            )
        )  # fmt: skip
        call_id = f"call_{session}_{k}"
        call = {"name": turn["name"], "arguments": turn["arguments"]}
        messages = [
            *messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": turn["result"]},
        ]
    return rows
