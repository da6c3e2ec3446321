"""Req and Batch: one generation request as the scheduler sees it, and the requests of one
forward pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixrt.core.finish_reason import FinishReason
from radixrt.core.pin_spec import PinOutcome, PinSpec
from radixrt.core.req_slots import (
    ConstrainedState,
    DraftBudget,
    DraftIndex,
    PrefixNode,
    RowGenerator,
    StopScan,
)
from radixrt.core.sampling import SamplingParams


@dataclass(slots=True)
class Req:
    """One generation request as the scheduler sees it.

    Token bookkeeping: `fill_ids` = prompt + output. The first `kv_len` of them have K/V in
    the pool at slots `req_to_token[req_pool_idx, :kv_len]`. Of those, the first `cached_len`
    slots are owned by the prefix cache (kept alive by the lock on `last_node`); slots
    [cached_len, kv_len) are owned by this request until it hands them to the cache or frees
    them. `cached_tokens` is the metric: prompt tokens served from the cache at admission.
    """

    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    extra_key: str | None = None  # prefix-cache namespace (cache salt / tenant)
    output_ids: list[int] = field(default_factory=list)
    req_pool_idx: int | None = None
    kv_len: int = 0
    cached_len: int = 0
    cached_tokens: int = 0
    # Of cached_tokens, how many each tier served ("device", "host", "disk"), and the seconds
    # spent loading from the lower tiers; set at the first admission with tiers configured.
    cached_tokens_by_tier: dict[str, int] = field(default_factory=dict)
    cache_load_s: float = 0.0
    # Prefix-cache handle (a locked tree node; written by cache/kv_manager.py only) while
    # running; None when not holding one.
    last_node: PrefixNode | None = None
    extend_len: int = 0  # tokens this step computes (set by the scheduler per step)
    finish_reason: FinishReason | None = None
    # Logprobs: per output token (logprob, token id) and top-k [(logprob, id), ...].
    output_logprobs: list[float] = field(default_factory=list)
    output_top_logprobs: list[list[tuple[float, int]]] = field(default_factory=list)
    input_logprobs: list[float | None] = field(default_factory=list)
    input_top_logprobs: list[list[tuple[float, int]] | None] = field(default_factory=list)
    # Each prompt token's rank among the vocabulary at its position (1: the most likely; ties
    # share the better rank), beside input_logprobs (None where that is None).
    input_token_ranks: list[int | None] = field(default_factory=list)
    # Stop-string scan state (scheduler/stop_check.py: StopState) once stop strings are checked,
    # else None; it follows output_ids, which are kept across retraction.
    stop_state: StopScan | None = None
    num_retractions: int = 0
    arrival_time: float = 0.0
    first_token_time: float | None = None
    generator: RowGenerator | None = None  # per-request, when seeded (executor's sampler)
    # Grammar state (scheduler/grammar_state.py: GrammarState) while constrained, else None.
    grammar: ConstrainedState | None = None
    # Prefixes of the prompt to pin once it finishes, and what became of each (in order).
    pins: list[PinSpec] = field(default_factory=list)
    pin_outcomes: list[PinOutcome] = field(default_factory=list)
    # Speculative decoding (scheduler/speculative/): tokens drafted after fill_ids for this
    # step to verify (empty: not speculating this step; extend_len is then 1 + len of them,
    # and their KV slots are the request's until the step keeps or frees them), the drafter's
    # per-request state, its draft budget (speculative/guard.py: DraftGuard), and the tokens
    # drafted and accepted so far, and the steps that sampled for it (a one-token step or a
    # verification: without speculation one per output token), the metrics.
    draft_ids: list[int] = field(default_factory=list)
    # A draft tree (speculative/tree.py): draft_ids in depth-first order, draft_parents[j] the
    # parent of draft j + 1 (0: the last token; empty: a chain); draft_rows, once its slots are
    # laid out, the (req_to_token row, prefix length) each of its 1 + len(draft_ids) tokens
    # attends with (empty: its own row, consecutive positions). Both cleared with draft_ids.
    draft_parents: list[int] = field(default_factory=list)
    draft_rows: list[tuple[int, int]] = field(default_factory=list)
    draft_state: DraftIndex | None = None
    draft_guard: DraftBudget | None = None
    # With a draft model (speculative/draft_model.py): positions [0, draft_kv_len) of this
    # request's slots hold the draft model's K/V as far as anyone knows. Set to the device's
    # cached prefix at admission and to 0 at release (cache/kv_manager.py); moved on by the
    # drafter. A stale entry below it can cost acceptance, never correctness.
    draft_kv_len: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0
    sampling_steps: int = 0
    # Its predicted output's index (speculative/prediction.py: PredictionIndex) once it
    # drafted from sampling_params.prediction_ids; whether this step's draft came from it;
    # and the predicted tokens drafted and accepted so far (usage's prediction tokens).
    prediction: DraftIndex | None = None
    draft_predicted: bool = False
    prediction_drafted: int = 0
    prediction_accepted: int = 0

    @property
    def fill_ids(self) -> list[int]:
        return self.input_ids + self.output_ids

    def step_ids(self) -> list[int]:
        """The tokens this step computes: fill_ids[kv_len : kv_len + extend_len], followed by
        the draft when speculating."""
        ids = self.fill_ids
        if self.draft_ids:
            ids = ids + self.draft_ids
        return ids[self.kv_len : self.kv_len + self.extend_len]

    @property
    def seq_len(self) -> int:
        return len(self.input_ids) + len(self.output_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def finish(self, reason: FinishReason) -> None:
        if self.finish_reason is None:
            self.finish_reason = reason


@dataclass(slots=True)
class Batch:
    """The requests of one forward pass; each computes `req.extend_len` new tokens.

    A request with extend_len == 1 and kv_len > 0 is decoding; longer extends are prefill
    chunks. One batch may mix both. `sample_mask[i]` says whether request i's last computed
    token is the end of its fill_ids (so a new token is sampled) or a prefill chunk boundary;
    a speculating request (draft_ids set) computes its drafted tokens too, and samples.
    """

    reqs: list[Req]
    sample_mask: list[bool]

    @property
    def num_tokens(self) -> int:
        return sum(r.extend_len for r in self.reqs)

    @property
    def is_decode(self) -> bool:
        return all(r.extend_len == 1 and r.kv_len > 0 for r in self.reqs)

    def __len__(self) -> int:
        return len(self.reqs)
