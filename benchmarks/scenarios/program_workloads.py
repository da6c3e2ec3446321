"""The SGLang paper's program workloads, written in radixrt's language with synthetic data.

Each workload is a program plus a list of keyword-argument dicts (one per program run),
built from a seeded WordSource: the text is random words, the shape (shared few-shot
context, fork widths, turns, steps) is the paper's. `GEN_ONLY` lists the workloads that use
nothing but `gen` (so they also run on OpenAI-compatible peers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import radixrt.lang as rt
from benchmarks.load.datasets import WordSource

LETTERS = "ABCD"
JSON_SCHEMA = {
    "type": "object",
    # Bounded fields, so that any model (a random one included) closes the object within
    # max_tokens: at most 12 tokens per string, 3 per number, about 15 of structure.
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "city": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "city", "age"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    program: Any  # lang.Program
    items: list[dict[str, Any]]
    gen_only: bool


def make_workloads(words: WordSource, num_items: int) -> list[Workload]:
    """All seven workloads, each with `num_items` program runs."""
    w = words
    few_shot_ctx = "".join(_mc_question(w) + f" {LETTERS[i % 4]}\n\n" for i in range(5))
    swag_ctx = "".join(f"{w.text(24)}{w.text(12)}\n\n" for _ in range(10))
    tools = "Tools:\n" + "".join(f"- tool{i}:{w.text(32)}\n" for i in range(6))
    builders: list[tuple[str, Any, Callable[[], dict[str, Any]], bool]] = [
        (
            "few-shot",
            few_shot,
            lambda: {"context": few_shot_ctx, "question": _mc_question(w)},
            True,
        ),
        (
            "hellaswag-select",
            hellaswag,
            lambda: {
                "context": swag_ctx,
                "query": w.text(24),
                "endings": [w.text(8) for _ in range(4)],
            },
            False,
        ),
        ("tree-of-thought", tree_of_thought, lambda: {"question": w.text(48)}, True),
        ("skeleton-of-thought", skeleton_of_thought, lambda: {"question": w.text(48)}, True),
        (
            "multi-turn-chat",
            multi_turn_chat,
            lambda: {"turns": [w.text(32) for _ in range(4)]},
            True,
        ),
        ("json-extraction", json_extraction, lambda: {"document": w.text(160)}, False),
        (
            "react-agent",
            react_agent,
            lambda: {
                "tools": tools,
                "question": w.text(24),
                "observations": [w.text(24) for _ in range(3)],
            },
            True,
        ),
    ]
    return [
        Workload(name, prog, [make() for _ in range(num_items)], gen_only)
        for name, prog, make, gen_only in builders
    ]


def _mc_question(w: WordSource) -> str:
    options = "".join(f"\n{c}.{w.text(6)}" for c in LETTERS)
    return f"Question:{w.text(32)}{options}\nAnswer:"


@rt.function
def few_shot(s: Any, context: str, question: str) -> None:
    """MMLU-style: a shared 5-shot context, then one letter."""
    s += "The following are multiple choice questions.\n\n" + context + question
    s += rt.gen("answer", max_tokens=1, temperature=0)


@rt.function
def hellaswag(s: Any, context: str, query: str, endings: list[str]) -> None:
    """HellaSwag-style: a shared 10-shot context, then the best of 4 endings."""
    s += context + query
    s += rt.select("ending", choices=endings)


def _expand(s: Any, depth: int) -> None:
    if depth == 0:
        return
    branches = s.fork(2)
    branches += lambda i: (
        f"\nIdea {i + 1}:" + rt.gen("idea", max_tokens=8, stop="\n", temperature=0)
    )
    for b in branches:
        _expand(b, depth - 1)
    branches.join()


@rt.function
def tree_of_thought(s: Any, question: str) -> None:
    """Fork 2 ways at each of 3 levels (14 gens), each branch extending its parent."""
    s += "Question:" + question + "\nLet us think step by step."
    _expand(s, 3)


@rt.function
def skeleton_of_thought(s: Any, question: str) -> None:
    """A skeleton of 3 points, then one fork per point to expand it."""
    s += "Question:" + question + "\nSkeleton (three short points):\n"
    s += "1." + rt.gen("skeleton", max_tokens=24, temperature=0)
    points = s.fork(3)
    points += lambda i: f"\nExpand point {i + 1}:" + rt.gen("point", max_tokens=16, temperature=0)
    points.join()


@rt.function
def multi_turn_chat(s: Any, turns: list[str]) -> None:
    """Four user turns, each answered before the next (plain-text roles)."""
    for i, turn in enumerate(turns):
        s += (
            f"User:{turn}\nAssistant:"
            + rt.gen(f"reply{i}", max_tokens=16, stop="\n", temperature=0)
            + "\n"
        )


@rt.function
def json_extraction(s: Any, document: str) -> None:
    """Fields of a document as JSON constrained by a schema."""
    s += "Document:" + document + "\nExtract name, city and age as JSON:\n"
    s += rt.gen("json", max_tokens=64, json_schema=JSON_SCHEMA, temperature=0)


@rt.function
def react_agent(s: Any, tools: str, question: str, observations: list[str]) -> None:
    """ReAct: a shared tool description, then thought / action / observation steps."""
    s += tools + "Question:" + question + "\n"
    for i, obs in enumerate(observations):
        s += "Thought:" + rt.gen(f"thought{i}", max_tokens=12, stop="\n", temperature=0)
        s += "\nAction:" + rt.gen(f"action{i}", max_tokens=8, stop="\n", temperature=0)
        s += "\nObservation:" + obs + "\n"
