"""DraftDepth: how deep each of a step's drafts pays, from what a row costs a pass (StepCost,
measured) and how often the request's drafts of that kind are kept (acceptance.py). One per
Speculation: it owns the row-cost measurements and the engine's acceptance rates. Not
adaptive (--disable-adaptive-draft-depth): every draft is verified as long as the drafter and
the guard make it, as engines with a fixed number of speculative tokens do."""

from __future__ import annotations

from radixrt.core import Req
from radixrt.scheduler.speculative.acceptance import Acceptance, engine_rates, paying_depth
from radixrt.scheduler.speculative.guard import DraftGuard
from radixrt.scheduler.speculative.step_cost import StepCost


class DraftDepth:
    """The row-cost bar of a step and the depth each draft may have under it."""

    def __init__(self, device_type: str = "cpu", adaptive: bool = True) -> None:
        self.adaptive = adaptive  # False: no bar, every draft token allotted
        self.cost = StepCost(device_type)
        # The engine's acceptance of (untrusted, trusted) drafts: a request's prior.
        self.rates: tuple[Acceptance, Acceptance] = engine_rates()
        # The engine's acceptance of drafts verified in a prompt's own pass (its first
        # tokens: an agent's turn that starts as its earlier ones did, or not), counted apart
        # so that a prompt's guess at its answer moves no decoding request's rate.
        self.after_prompts: Acceptance = engine_rates()[1]

    def observe(self, rows: int, sampled: int, seconds: float) -> None:
        """A forward pass of `rows` rows, `sampled` of them sampled, took `seconds`: a pass
        whose every row is sampled (decode, verify) times the rows' cost."""
        if rows == sampled and self.adaptive:
            self.cost.observe(rows, seconds)

    def bar(self, decoding: list[Req]) -> float:
        """The chance of acceptance a draft token needs in a step of `decoding` (each set to
        its own rows, drafts not yet added) to pay for its row (0: not adaptive)."""
        if not self.adaptive:
            return 0.0
        return self.cost.min_accept(len(decoding), sum(r.extend_len for r in decoding))

    def rate(self, req: Req, trusted: bool) -> float:
        """The chance `req`'s next drafted token of this kind is kept (the engine's rate as
        the prior)."""
        guard = req.draft_guard
        assert isinstance(guard, DraftGuard)  # made by the plan before it asks
        return guard.rates[trusted].rate(self.rates[trusted].plain_rate())

    def after_prompt_rate(self) -> float:
        """The chance a draft verified in its prompt's pass keeps its next token: the
        engine's rate of such drafts, shrunk toward its trusted decoding drafts' (so it never
        quite reaches 0: a long prefill, where rows cost little, still tries one now and
        then, and finds out when prompts change)."""
        return self.after_prompts.rate(self.rates[True].plain_rate())

    def allot(self, tokens: float, rows: int, chains: list[tuple[float, int, float]]) -> list[int]:
        """How many tokens of each draft chain (rate, length, seconds per token besides its
        row: a constrained request's grammar masks) a step of `rows` rows expected to emit
        `tokens` tokens without them verifies: the most likely drafted tokens first (the
        i-th of a chain kept with probability rate ** i), as many as make the step's expected
        tokens per second, (tokens + kept) / (T(rows + drafted) + their own seconds), the
        highest. A token's own seconds count once T is measured in seconds. Not adaptive:
        every chain whole."""
        if not self.adaptive:
            return [n for _, n, _ in chains]
        ranked = sorted(
            ((rate**i, -i, j) for j, (rate, n, _) in enumerate(chains) for i in range(1, n + 1)),
            reverse=True,
        )  # within a chain the earlier token first: every allotment is a prefix of each
        own = 1.0 if self.cost.fitted else 0.0  # before the fit T is in rows' units
        best, take = tokens / self.cost.seconds(rows), 0
        expected, extra = tokens, 0.0
        for m, (q, _, j) in enumerate(ranked, 1):
            expected += q
            extra += own * chains[j][2]
            value = expected / (self.cost.seconds(rows + m) + extra)
            if value > best:
                best, take = value, m
        out = [0] * len(chains)
        for _, _, j in ranked[:take]:
            out[j] += 1
        return out

    def depth(self, req: Req, trusted: bool, bar: float, most: int) -> int:
        """The longest draft of `req` (at most `most`) whose tokens each clear `bar`, from its
        recent acceptance of this kind of draft (the engine's as the prior)."""
        return paying_depth(self.rate(req, trusted), bar, most)
