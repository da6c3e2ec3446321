"""StepCost: what one more row costs a decode pass, measured on this machine, so that a step
drafts only tokens likely enough to be accepted to pay for their rows.

A pass whose every row is sampled (decode, or decode with verifying rows) takes about
W + c * R seconds for R rows: W is paid once per pass (reading the weights, launching the
layers), c per row (its matmuls, its attention). A step that emits N tokens in T seconds
gains from one more draft row, accepted with probability q, when (N + q) / (T + c) > N / T,
that is when q > c * N / T = N / (K + R) with K = W / c: `min_accept` is that bar. On a
CPU, where a row's matmuls are a sizeable part of a pass, the bar is low at batch 1 (drafts
pay at almost any acceptance) and high at batch 8 (only drafts likely to be kept do); on a
GPU, where rows are nearly free until the matmuls fill the device, K is large and so is the
room for drafts.

K is measured: the times of such passes are kept per row count (the last `WINDOW` of each);
the line through the counts' medians (least squares, each count weighted by its samples)
gives W and c. Until two row counts `SPREAD` apart have `MIN_SAMPLES` each, or when the fit
is not a rising line, the device's prior K is used. Medians keep a busy machine's stalls out
of the fit; the window follows contexts as they grow.
"""

from __future__ import annotations

import statistics
from collections import deque

WINDOW = 32  # recent times kept per row count
MIN_SAMPLES = 6  # times a row count needs before it counts in the fit
SPREAD = 3  # the least difference of row counts the fit needs
REFIT_EVERY = 16  # passes between fits
PRIOR_K = {"cpu": 12.0, "cuda": 256.0}  # W / c before the fit (rows a pass's fixed cost is)
K_RANGE = (1.0, 4096.0)


class StepCost:
    """The measured cost of a row against a pass's fixed cost (one per scheduler)."""

    def __init__(self, device_type: str = "cpu", fixed_k: float | None = None) -> None:
        self.prior = fixed_k or PRIOR_K.get(device_type, PRIOR_K["cpu"])
        self.k = self.prior  # W / c: rows whose compute costs what a pass's fixed part does
        self.measures = fixed_k is None  # False: K stays `fixed_k`
        self.times: dict[int, deque[float]] = {}  # row count -> its recent pass seconds
        self.passes = 0
        self.fitted = False

    def observe(self, rows: int, seconds: float) -> None:
        """A pass of `rows` rows, every one sampled, took `seconds`."""
        if rows <= 0 or seconds <= 0.0 or not self.measures:
            return
        self.times.setdefault(rows, deque(maxlen=WINDOW)).append(seconds)
        self.passes += 1
        if self.passes % REFIT_EVERY == 0:
            self._fit()

    def min_accept(self, tokens: float, rows: int) -> float:
        """The acceptance probability one more draft row needs to pay, in a step of `rows`
        rows expected to emit `tokens` tokens."""
        return tokens / (self.k + rows)

    def _fit(self) -> None:
        points = [(r, statistics.median(t), len(t)) for r, t in self.times.items()
                  if len(t) >= MIN_SAMPLES]  # fmt: skip
        if not points or max(r for r, _, _ in points) - min(r for r, _, _ in points) < SPREAD:
            return
        n = sum(w for _, _, w in points)
        mr = sum(r * w for r, _, w in points) / n
        mt = sum(t * w for _, t, w in points) / n
        var = sum(w * (r - mr) ** 2 for r, _, w in points)
        c = sum(w * (r - mr) * (t - mt) for r, t, w in points) / var
        fixed = mt - c * mr
        if c <= 0.0 or fixed <= 0.0:
            self.k, self.fitted = self.prior, False  # not a rising line: noise, keep the prior
            return
        self.k = min(max(fixed / c, K_RANGE[0]), K_RANGE[1])
        self.fitted = True
