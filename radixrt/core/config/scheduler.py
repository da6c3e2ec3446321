"""SchedulerConfig: batching limits, the admission policy, constrained decoding."""

from __future__ import annotations

from dataclasses import dataclass

from radixrt.core.config.choices import GRAMMAR_BACKEND_NAMES, SCHEDULE_POLICIES

# Default prompt tokens per step by device type. On CPU a long prefill step delays every
# running request's next token and every new request's first: measured on 2 cores
# (docs/benchmarks.md section 8), 512 against 1024 cut the chat workload's median TTFT by a
# quarter at the same throughput, and 1024 against 2048 the unique workload's by 28%.
PREFILL_CHUNK = {"cpu": 512, "cuda": 2048}


@dataclass(frozen=True)
class SchedulerConfig:
    """Batching limits and the admission policy."""

    max_running_requests: int = 64
    # Max prompt tokens computed per step; None: the device's default (PREFILL_CHUNK).
    chunked_prefill_size: int | None = None
    schedule_policy: str = "lpm"
    # Decode steps reserved per running request when admitting new ones.
    decode_reserve_tokens: int = 8
    # A waiting request older than this (seconds) is admitted first, whatever the policy.
    max_wait_s: float = 10.0
    random_seed: int = 0
    # Constrained decoding: the grammar backend, the compile time limit (a spec that takes
    # longer is refused), whether tokens the grammar forces skip their decode steps, and
    # whether a backend that bounds lengths masks tokens that could not finish in the budget.
    grammar_backend: str = "auto"
    grammar_timeout_s: float = 10.0
    disable_jump_forward: bool = False
    disable_grammar_budget: bool = False
    # The auto backend's cache of compiled regex automata (grammar/branches.py: a few to ~30
    # MB each), least recently used dropped past this many MB.
    grammar_branch_cache_mb: int = 512
    # Speculative decoding by lookup (scheduler/speculative/): draft up to this many tokens per
    # request (not grammar-constrained) and step from its own prompt and output and from the
    # prefix cache's paths, verified in the same forward pass (fewer while they are rejected:
    # speculative/guard.py); 0: off. The longest suffix n-gram matched is
    # speculative_ngram_max tokens (then shorter ones down to 1).
    speculative_num_draft_tokens: int = 0
    speculative_ngram_max: int = 4
    # Draft with a second, smaller model of the same vocabulary (a local HF folder) instead of
    # by lookup: its greedy continuation, speculative_num_draft_tokens long at most
    # (scheduler/speculative/draft_model.py); None: lookup drafts.
    speculative_draft_model: str | None = None
    # Draft trees (scheduler/speculative/tree.py): lookup drafts that diverge (several cached
    # continuations, earlier occurrences of the request's suffix going on differently) are
    # verified together, up to this many branches and speculative_tree_nodes nodes (0: twice
    # speculative_num_draft_tokens) per request and step; 1: one chain. CPU passes only.
    speculative_tree_branches: int = 1
    speculative_tree_nodes: int = 0
    # Verify every draft as long as the drafter and the guard make it (up to
    # speculative_num_draft_tokens), as engines with a fixed number of speculative tokens do,
    # instead of only the tokens whose chance of acceptance pays for their rows at this
    # machine's measured pass cost (speculative/step_cost.py).
    disable_adaptive_draft_depth: bool = False

    def __post_init__(self) -> None:
        if self.max_running_requests < 1:
            raise ValueError(f"max_running_requests must be >= 1, got {self.max_running_requests}")
        if self.chunked_prefill_size is not None and self.chunked_prefill_size < 1:
            raise ValueError(f"chunked_prefill_size must be >= 1, got {self.chunked_prefill_size}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(
                f"schedule_policy must be one of {SCHEDULE_POLICIES}, got {self.schedule_policy!r}"
            )
        if self.grammar_branch_cache_mb < 1:
            raise ValueError(
                f"grammar_branch_cache_mb must be >= 1, got {self.grammar_branch_cache_mb}"
            )
        if self.grammar_backend not in GRAMMAR_BACKEND_NAMES:
            raise ValueError(
                f"grammar_backend must be one of {GRAMMAR_BACKEND_NAMES}, "
                f"got {self.grammar_backend!r}"
            )
        if self.speculative_num_draft_tokens < 0:
            raise ValueError(
                "speculative_num_draft_tokens must be >= 0 (0: off), "
                f"got {self.speculative_num_draft_tokens}"
            )
        if self.speculative_tree_branches < 1 or self.speculative_tree_nodes < 0:
            raise ValueError(
                "speculative_tree_branches must be >= 1 and speculative_tree_nodes >= 0, got "
                f"{self.speculative_tree_branches} and {self.speculative_tree_nodes}"
            )
        if self.speculative_ngram_max < 1:
            raise ValueError(
                f"speculative_ngram_max must be >= 1, got {self.speculative_ngram_max}"
            )
        if self.speculative_draft_model is not None and self.speculative_num_draft_tokens < 1:
            raise ValueError(
                "speculative_draft_model needs speculative_num_draft_tokens >= 1 (the most "
                "tokens it drafts per request and step)"
            )
        if self.grammar_timeout_s <= 0:
            raise ValueError(f"grammar_timeout_s must be > 0, got {self.grammar_timeout_s}")

    def prefill_chunk(self, device_type: str) -> int:
        """Prompt tokens computed per step at most on a device of this type."""
        if self.chunked_prefill_size is not None:
            return self.chunked_prefill_size
        return PREFILL_CHUNK.get(device_type, PREFILL_CHUNK["cuda"])
