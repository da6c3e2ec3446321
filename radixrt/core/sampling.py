"""SamplingParams: how one request samples and when it stops, parsed from JSON-like dicts
and validated here (the server, the Engine and the language all build them)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

# Fields accepted by SamplingParams.from_dict besides the dataclass fields (aliases).
SAMPLING_ALIASES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Float ranges the float32 sampler handles without overflow or underflow (README.md).
TEMPERATURE_RANGE = (0.0, 100.0)  # 0 is greedy
REPETITION_PENALTY_RANGE = (0.01, 100.0)


@dataclass(slots=True)
class SamplingParams:
    """How one request samples and when it stops; validated by `validate()`."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    n: int = 1
    skip_special_tokens: bool = True
    # Logprobs: per output token (and top-k alternatives); input tokens from logprob_start_len
    # (-1: none) when return_logprob is set.
    return_logprob: bool = False
    top_logprobs_num: int = 0
    logprob_start_len: int = -1
    # Constrained decoding specs (at most one); used by the grammar subsystem.
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None
    # Constrained only: where the grammar could end, the probability of every token it
    # disallows counts toward ending (EOS), so a value ends where the model's own text would
    # have left the grammar (a typed gen's "24" before "."), not where the budget runs out.
    end_on_exit: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any] | SamplingParams | None) -> SamplingParams:
        """Build from a dict (unknown keys raise ValueError), copy a SamplingParams, or defaults."""
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return dataclasses.replace(d, stop=list(d.stop), stop_token_ids=list(d.stop_token_ids))
        if not isinstance(d, dict):
            raise ValueError(f"sampling_params must be a dict, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            key = SAMPLING_ALIASES.get(key, key)
            if key not in names:
                raise ValueError(f"unknown sampling parameter {key!r}")
            kwargs[key] = value
        params = cls(**kwargs)
        params.normalize()
        params.validate()
        return params

    def normalize(self) -> None:
        """Coerce convenience forms: a single stop string, a json_schema given as a dict."""
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        if self.json_schema is not None and not isinstance(self.json_schema, str):
            import json

            try:
                self.json_schema = json.dumps(self.json_schema)
            except (TypeError, ValueError, RecursionError) as e:
                raise ValueError(f"invalid sampling parameter json_schema: {e}") from None
        if self.top_k == 0:
            self.top_k = -1

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field.

        Every integer fits int64 and every float is finite and inside a range the float32
        sampling math cannot overflow or underflow (the ranges are listed in README.md).
        Bounds that depend on the model (top_k, stop_token_ids within the vocabulary) or the
        prompt (logprob_start_len) are checked where those are known: `check_against`.
        """
        for name, ok, why in self._checks():
            if not ok:
                raise ValueError(
                    f"invalid sampling parameter {name}={getattr(self, name)!r}: {why}"
                )
        specs = [s for s in (self.regex, self.json_schema, self.ebnf) if s is not None]
        if len(specs) > 1:
            raise ValueError("at most one of regex, json_schema and ebnf may be given")
        for name in ("regex", "json_schema", "ebnf"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"invalid sampling parameter {name}: must be a string")

    def _checks(self) -> list[tuple[str, bool, str]]:
        lo_t, hi_t = TEMPERATURE_RANGE
        lo_r, hi_r = REPETITION_PENALTY_RANGE
        return [
            (
                "max_new_tokens",
                _is_int(self.max_new_tokens, 0),
                f"must be an integer in [0, {INT64_MAX}]",
            ),
            (
                "min_new_tokens",
                _is_int(self.min_new_tokens, 0) and self.min_new_tokens <= self.max_new_tokens,
                "must be an integer in [0, max_new_tokens]",
            ),
            (
                "temperature",
                _is_num(self.temperature) and lo_t <= self.temperature <= hi_t,
                f"must be in [{lo_t:g}, {hi_t:g}]",
            ),
            ("top_p", _is_num(self.top_p) and 0 < self.top_p <= 1, "must be in (0, 1]"),
            (
                "top_k",
                _is_int(self.top_k, -1) and self.top_k != 0,
                f"must be -1 or 0 (off), or an integer in [1, {INT64_MAX}]",
            ),
            ("min_p", _is_num(self.min_p) and 0 <= self.min_p <= 1, "must be in [0, 1]"),
            (
                "repetition_penalty",
                _is_num(self.repetition_penalty) and lo_r <= self.repetition_penalty <= hi_r,
                f"must be in [{lo_r:g}, {hi_r:g}]",
            ),
            (
                "frequency_penalty",
                _is_num(self.frequency_penalty) and -2 <= self.frequency_penalty <= 2,
                "must be in [-2, 2]",
            ),
            (
                "presence_penalty",
                _is_num(self.presence_penalty) and -2 <= self.presence_penalty <= 2,
                "must be in [-2, 2]",
            ),
            (
                "seed",
                self.seed is None or _is_int(self.seed, INT64_MIN),
                f"must be an integer in [{INT64_MIN}, {INT64_MAX}]",
            ),
            (
                "stop",
                isinstance(self.stop, list) and all(isinstance(s, str) and s for s in self.stop),
                "must be a non-empty string or a list of them",
            ),
            (
                "stop_token_ids",
                isinstance(self.stop_token_ids, list)
                and all(_is_int(t, 0) for t in self.stop_token_ids),
                f"must be a list of token ids (integers in [0, {INT64_MAX}])",
            ),
            ("ignore_eos", isinstance(self.ignore_eos, bool), "must be a boolean"),
            ("n", _is_int(self.n, 1), f"must be an integer in [1, {INT64_MAX}]"),
            (
                "skip_special_tokens",
                isinstance(self.skip_special_tokens, bool),
                "must be a boolean",
            ),
            ("return_logprob", isinstance(self.return_logprob, bool), "must be a boolean"),
            ("end_on_exit", isinstance(self.end_on_exit, bool), "must be a boolean"),
            (
                "top_logprobs_num",
                _is_int(self.top_logprobs_num, 0),
                f"must be an integer in [0, {INT64_MAX}]",
            ),
            (
                "logprob_start_len",
                _is_int(self.logprob_start_len, -1),
                f"must be an integer in [-1, {INT64_MAX}]",
            ),
        ]

    def check_against(self, prompt_len: int, vocab_size: int) -> str | None:
        """Why these parameters cannot run on this prompt and model (a message naming the
        field), or None. The server and the scheduler both call this."""
        if self.top_k > vocab_size:
            return f"invalid sampling parameter top_k={self.top_k}: must be <= {vocab_size}"
        if self.top_logprobs_num > vocab_size:
            return (
                f"invalid sampling parameter top_logprobs_num={self.top_logprobs_num}: "
                f"must be <= {vocab_size}"
            )
        bad = next((t for t in self.stop_token_ids if t >= vocab_size), None)
        if bad is not None:
            return f"stop token id {bad} is outside the vocabulary [0, {vocab_size})"
        if self.logprob_start_len >= prompt_len > 0:
            return (
                f"invalid sampling parameter logprob_start_len={self.logprob_start_len}: "
                f"must be < the prompt's {prompt_len} tokens"
            )
        return None

    def samples(self) -> list[SamplingParams]:
        """One SamplingParams per sample of n (itself when n == 1): the n fan-out."""
        return [self] if self.n == 1 else [self.for_sample(i) for i in range(self.n)]

    def for_sample(self, i: int) -> SamplingParams:
        """The parameters of sample i of n: n == 1, and a seed of its own (seed + i, wrapped
        into int64) when seeded. The one place the n fan-out derives per-sample params."""
        sub = SamplingParams.from_dict(self)
        sub.n = 1
        if self.seed is not None:
            sub.seed = (self.seed + i - INT64_MIN) % 2**64 + INT64_MIN
        return sub

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _is_num(x: object) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x: object, low: int) -> bool:
    """An int (not a bool) in [low, INT64_MAX]."""
    return type(x) is int and low <= x <= INT64_MAX
