"""Serving-benchmark workloads, generated locally from a seed (nothing is downloaded).

Prompts are made of words that the tokenizer encodes as one token each after a space, so a
prompt of n words (" w1 w2 ... wn") is exactly n tokens, and a shared prefix stays a token
prefix whatever follows it. Every workload is a list of `Session`s: a client sends turns[0],
waits for the answer, then sends turns[0] + answer + turns[1], and so on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

DATASETS = ("random", "shared-prefix", "multi-turn", "agent")


@dataclass(frozen=True, slots=True)
class Session:
    """One client's requests in order; turns[k] (k > 0) is appended after answer k-1."""

    turns: tuple[str, ...]
    turn_lens: tuple[int, ...]  # tokens of each turn's new text
    output_len: int  # tokens generated per turn
    shared_len: int = 0  # tokens of turns[0] another session has already sent (0: the first)

    def prompt_lens(self) -> list[int]:
        """Prompt tokens of each turn, assuming each answer is output_len tokens."""
        lens, total = [], 0
        for k, n in enumerate(self.turn_lens):
            total += n + (self.output_len if k > 0 else 0)
            lens.append(total)
        return lens

    def optimal_cached(self) -> list[int]:
        """Cached prompt tokens per turn with a perfect prefix cache: the shared prefix, then
        the previous prompt and answer but the answer's last token (sampled, never run)."""
        lens = self.prompt_lens()
        return [self.shared_len] + [lens[k - 1] + self.output_len - 1 for k in range(1, len(lens))]


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    sessions: list[Session]

    @property
    def num_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def optimal_hit_rate(self) -> float:
        """Cached / prompt tokens over all requests with a perfect token-granular cache."""
        prompt = sum(sum(s.prompt_lens()) for s in self.sessions)
        cached = sum(sum(s.optimal_cached()) for s in self.sessions)
        return cached / prompt if prompt else 0.0


class WordSource:
    """Random single-token words; `text(n)` is exactly n tokens for the tokenizer given."""

    def __init__(self, words: list[str], seed: int) -> None:
        if not words:
            raise ValueError("the word list is empty")
        self.words = sorted(set(words))
        self.rng = random.Random(seed)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, seed: int) -> WordSource:
        """Lower-case alphabetic words of 3-8 letters that encode to one token after a space."""
        vocab = tokenizer.get_vocab()
        words = [w[1:] for w in vocab if w.startswith("\u0120") and 4 <= len(w) <= 9]
        words = [w for w in words if w.isascii() and w.isalpha() and w.islower()]
        ok = [w for w in words if len(tokenizer.encode(" " + w, add_special_tokens=False)) == 1]
        return cls(ok, seed)

    def text(self, n: int) -> str:
        """n words, each preceded by a space."""
        return "".join(" " + self.rng.choice(self.words) for _ in range(n))


def make_dataset(name: str, words: WordSource, **sizes: int) -> Dataset:
    """The workload `name` (one of DATASETS) with the sizes given (see each maker's defaults)."""
    makers = {
        "random": random_dataset,
        "shared-prefix": shared_prefix_dataset,
        "multi-turn": multi_turn_dataset,
        "agent": agent_dataset,
    }
    if name not in makers:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    return makers[name](words, **sizes)


def random_dataset(
    words: WordSource, num_prompts: int = 32, input_len: int = 256, output_len: int = 16
) -> Dataset:
    """Independent prompts: nothing to share (the cache's overhead check)."""
    sessions = [
        Session((words.text(input_len),), (input_len,), output_len) for _ in range(num_prompts)
    ]
    return Dataset("random", sessions)


def shared_prefix_dataset(
    words: WordSource,
    num_groups: int = 4,
    prompts_per_group: int = 8,
    system_len: int = 512,
    question_len: int = 32,
    output_len: int = 16,
) -> Dataset:
    """G groups x P prompts: the group's system prompt (S tokens) + a question (Q tokens).

    Sessions are interleaved across groups (g0p0, g1p0, ..., g0p1, ...), so a group's prompts
    do not all arrive together."""
    systems = [words.text(system_len) for _ in range(num_groups)]
    sessions = []
    for p in range(prompts_per_group):
        for g in range(num_groups):
            text = systems[g] + words.text(question_len)
            shared = system_len if p > 0 else 0
            sessions.append(Session((text,), (system_len + question_len,), output_len, shared))
    return Dataset("shared-prefix", sessions)


def multi_turn_dataset(
    words: WordSource,
    num_conversations: int = 4,
    num_turns: int = 4,
    turn_len: int = 64,
    output_len: int = 32,
) -> Dataset:
    """C conversations x T turns; each turn appends the previous answer and a new message."""
    sessions = [
        Session(
            tuple(words.text(turn_len) for _ in range(num_turns)),
            (turn_len,) * num_turns,
            output_len,
        )
        for _ in range(num_conversations)
    ]
    return Dataset("multi-turn", sessions)


def agent_dataset(
    words: WordSource,
    num_agents: int = 4,
    num_steps: int = 4,
    tools_len: int = 1024,
    task_len: int = 32,
    observation_len: int = 32,
    output_len: int = 16,
) -> Dataset:
    """A long tool-description prefix shared by every agent; each step appends the model's
    action and a short observation."""
    tools = words.text(tools_len)
    sessions = []
    for a in range(num_agents):
        turns = (
            tools + words.text(task_len),
            *(words.text(observation_len) for _ in range(num_steps - 1)),
        )
        lens = (tools_len + task_len, *(observation_len,) * (num_steps - 1))
        sessions.append(Session(turns, lens, output_len, tools_len if a > 0 else 0))
    return Dataset("agent", sessions)
