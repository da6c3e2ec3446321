"""SamplingParams: how one request samples and when it stops. Built once at the edge (the
server's dialects, the Engine) from a JSON-like dict by `from_dict`, which checks every field's
type and value; frozen after that, and sent to the scheduler typed (GenerateReqMsg), so
nothing downstream parses or converts it again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from radixrt.core.sampling_checks import (
    INT64_MAX,
    INT64_MIN,
    REPETITION_PENALTY_RANGE,
    TEMPERATURE_RANGE,
    check_kind,
    field_kinds,
    normalized,
    value_checks,
)

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "REPETITION_PENALTY_RANGE",
    "SAMPLING_ALIASES",
    "TEMPERATURE_RANGE",
    "SamplingParams",
    "with_prediction_ids",
]

# Fields accepted by SamplingParams.from_dict besides the struct's fields (aliases).
SAMPLING_ALIASES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}


def with_prediction_ids(d: Any, encode: Callable[[str], list[int]]) -> Any:
    """`d` (a sampling dict) with its `prediction`, the predicted output as text (the name
    /generate, the Engine and the language take), tokenized by `encode` into prediction_ids;
    anything else as it is (a null prediction is none). ValueError names a prediction that is
    not text, or one given both as text and as ids."""
    if not isinstance(d, dict) or "prediction" not in d:
        return d
    text = d["prediction"]
    if text is None:  # none, as prediction_ids None
        return {k: v for k, v in d.items() if k != "prediction"}
    if not isinstance(text, str):
        raise ValueError(
            "invalid sampling parameter prediction: must be a string (the predicted output's "
            "text; prediction_ids takes token ids)"
        )
    if d.get("prediction_ids"):
        raise ValueError("give prediction (text) or prediction_ids, not both")
    rest = {k: v for k, v in d.items() if k != "prediction"}
    rest["prediction_ids"] = encode(text) if text else []
    return rest


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How one request samples and when it stops; `from_dict` validates, `replace` derives."""

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
    stop: list[str] = []
    stop_token_ids: list[int] = []
    # Stop once the output contains a match of one of these (radixrt/core/text/stop_regex.py says
    # which regexes are taken); the match is cut from the text like a stop string.
    stop_regex: list[str] = []
    # Keep the matched stop string or regex text in the output (which then ends with it).
    no_stop_trim: bool = False
    ignore_eos: bool = False
    n: int = 1
    skip_special_tokens: bool = True
    # Passed to the tokenizer's decode: a slow tokenizer puts spaces around special tokens it
    # shows; a fast one never does, whatever this says.
    spaces_between_special_tokens: bool = True
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
    # Predicted output (OpenAI's `prediction`): token ids the output is expected to repeat
    # for the most part (the file being edited, a document being reformatted). Speculative
    # decoding drafts from them (scheduler/speculative/prediction.py); the output is what it
    # would be without them, token for token, only sooner where they match.
    prediction_ids: list[int] = []
    # OpenAI's logit_bias: token id -> a value in [-100, 100] added to that token's logit
    # before the penalties, every other step of sampling and the grammar's -inf (which stays
    # -inf); logprobs still come from the model's own logits. JSON keys are strings of ids.
    logit_bias: dict[int, float] = {}
    # vLLM's allowed_token_ids: sampling picks only among these ids (every other logit -inf,
    # before logit_bias and the penalties); empty: every token. Not with a grammar, whose
    # forced tokens are not sampled. Logprobs still come from the model's own logits.
    allowed_token_ids: list[int] = []
    # A reasoning model's thinking (grammar/reasoning_gate.py): the output is reasoning until
    # the token reasoning_end_id, which a grammar (regex, json_schema, ebnf) then follows;
    # with reasoning_start_id, the reasoning is there only if the output opens with that
    # token (else the grammar applies from the first token); without it the output starts
    # inside the reasoning (the prompt opened it). thinking_token_budget: the most tokens
    # the reasoning may take, after which the end token is forced (vLLM's name).
    reasoning_end_id: int | None = None
    reasoning_start_id: int | None = None
    thinking_token_budget: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | SamplingParams | None) -> SamplingParams:
        """Build from a dict (unknown keys, values of the wrong type or out of range raise
        ValueError naming the field), take a SamplingParams as it is, or the defaults."""
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"sampling_params must be a dict, got {type(d).__name__}")
        kinds = field_kinds(cls)
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            key = SAMPLING_ALIASES.get(key, key)
            if key not in kinds:
                raise ValueError(f"unknown sampling parameter {key!r}")
            kwargs[key] = value
        kwargs = normalized(kwargs)
        for key, value in kwargs.items():
            check_kind(key, kinds[key], value)
        params = cls(**kwargs)
        params.validate()
        return params

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with `changes` (trusted: the caller keeps them valid)."""
        return msgspec.structs.replace(self, **changes)

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field.

        Every integer fits int64 and every float is finite and inside a range the float32
        sampling math cannot overflow or underflow (the ranges are listed in README.md).
        Bounds that depend on the model (top_k, stop_token_ids within the vocabulary) or the
        prompt (logprob_start_len) are checked where those are known: `check_against`.
        """
        for name, ok, why in value_checks(self):
            if not ok:
                shown = repr(getattr(self, name))
                if len(shown) > 200:  # a long list or map: its start names it well enough
                    shown = shown[:200] + "..."
                raise ValueError(f"invalid sampling parameter {name}={shown}: {why}")
        specs = [s for s in (self.regex, self.json_schema, self.ebnf) if s is not None]
        if len(specs) > 1:
            raise ValueError("at most one of regex, json_schema and ebnf may be given")
        if specs and self.allowed_token_ids:
            raise ValueError(
                "allowed_token_ids cannot be combined with regex, json_schema or ebnf (a "
                "grammar's forced tokens are not sampled)"
            )
        if self.reasoning_end_id is None and (
            self.reasoning_start_id is not None or self.thinking_token_budget is not None
        ):
            raise ValueError(
                "reasoning_start_id and thinking_token_budget need reasoning_end_id (the token "
                "that ends the reasoning)"
            )
        for name in ("regex", "json_schema", "ebnf"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"invalid sampling parameter {name}: must be a string")

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
        bad = next((t for t in self.prediction_ids if t >= vocab_size), None)
        if bad is not None:
            return f"prediction token id {bad} is outside the vocabulary [0, {vocab_size})"
        bad = next((t for t in self.logit_bias if t >= vocab_size), None)
        if bad is not None:
            return f"logit_bias token id {bad} is outside the vocabulary [0, {vocab_size})"
        bad = next((t for t in self.allowed_token_ids if t >= vocab_size), None)
        if bad is not None:
            return f"allowed_token_ids: token id {bad} is outside the vocabulary [0, {vocab_size})"
        for name in ("reasoning_end_id", "reasoning_start_id"):
            token = getattr(self, name)
            if token is not None and token >= vocab_size:
                return f"{name} {token} is outside the vocabulary [0, {vocab_size})"
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
        if self.seed is None:
            return self.replace(n=1)
        return self.replace(n=1, seed=(self.seed + i - INT64_MIN) % 2**64 + INT64_MIN)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)
