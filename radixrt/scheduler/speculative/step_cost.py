"""StepCost: what a decode pass of R rows costs, measured on this machine, so that a step
drafts only tokens likely enough to be accepted to pay for their rows.

A pass whose every row is sampled (decode, or decode with verifying rows) takes T(R) seconds
for R rows: about W + c * R while R is small (W paid once per pass: reading the weights,
launching the layers; c per row: its matmuls, its attention), more per row as rows grow (a
2-core Zen 5, bfloat16 weights, contexts of about 400 tokens: 5.5 ms at 2 rows, 7.6 at 8,
40 at 83, 60 at 128: 0.35 ms a row, then 0.44). A step
expected to emit E tokens over R rows gains from m more draft rows, their tokens kept E'
times in all, when (E + E') / T(R + m) > E / T(R): `seconds` is T, and `min_accept` the
local bar for one more row, E * (T(R + 1) - T(R)) / T(R) (E / (K + R) where T is a line with
K = W / c).

T is measured: the times of such passes are kept per bucket of row counts (the last
`WINDOW` of each); each bucket with `MIN_SAMPLES` gives a point (its median rows, its median
time), and T runs through the points' lower convex hull (a point above it is a stall or too
few samples; a row's cost only grows with the rows), straight on past the last point with
the last segment's slope. Until two points `SPREAD` rows apart exist, or when the points do
not rise, T is the device's prior line (K = `PRIOR_K`). On a CPU the bar is low at
batch 1 (drafts pay at almost any acceptance) and high at batch 8 (only drafts likely to be
kept do); on a GPU, where rows are nearly free until the matmuls fill the device, K is large
and so is the room for drafts. Medians keep a busy machine's stalls out of the curve; the
window follows contexts as they grow.

A bucket no pass has fallen in for `STALE_PASSES` passes leaves the curve: a single stream
whose fit once said drafts do not pay (a stall while its draft rows were measured) runs one-row
passes only, and would keep that verdict forever; with the bucket gone the prior returns, the
next drafts measure their rows again, and the fit decides afresh.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque

WINDOW = 32  # recent passes kept per bucket of row counts
MIN_SAMPLES = 4  # passes a bucket needs before it is a point of the curve
SPREAD = 3  # the least difference of row counts between the first and last points
REFIT_EVERY = 16  # passes between fits
STALE_PASSES = 1024  # passes since a bucket's last one before it leaves the curve
PRIOR_K = {"cpu": 12.0, "cuda": 256.0}  # W / c before the fit (rows a pass's fixed cost is)
K_RANGE = (1.0, 4096.0)
# Row-count buckets: counts up to each edge (past the last: one bucket per doubling).
EDGES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128)


def bucket(rows: int) -> int:
    """The bucket of `rows` rows: the least edge not below it (a power of two past 128)."""
    i = bisect.bisect_left(EDGES, rows)
    return EDGES[i] if i < len(EDGES) else 1 << (rows - 1).bit_length()


class StepCost:
    """The measured cost of a pass by its rows (one per scheduler)."""

    def __init__(self, device_type: str = "cpu", fixed_k: float | None = None) -> None:
        self.prior = fixed_k or PRIOR_K.get(device_type, PRIOR_K["cpu"])
        self.k = self.prior  # W / c of the line through the points (reported; the prior's)
        self.measures = fixed_k is None  # False: T stays the prior line
        # bucket -> its recent passes (rows, seconds, the pass count when it ran)
        self.times: dict[int, deque[tuple[int, float, int]]] = {}
        self.passes = 0
        self.fitted = False
        self.curve: list[tuple[float, float]] = []  # (rows, seconds), rising; [] until fitted

    def observe(self, rows: int, seconds: float) -> None:
        """A pass of `rows` rows, every one sampled, took `seconds`."""
        if rows <= 0 or seconds <= 0.0 or not self.measures:
            return
        self.passes += 1
        self.times.setdefault(bucket(rows), deque(maxlen=WINDOW)).append(
            (rows, seconds, self.passes)
        )
        if self.passes % REFIT_EVERY == 0:
            self._fit()

    def seconds(self, rows: float) -> float:
        """T(rows): a pass's time for `rows` rows (in units of a row's cost on the prior line
        until fitted; only ratios of T are used)."""
        curve = self.curve if self.fitted else []
        if len(curve) < 2:
            return self.k + rows
        i = min(max(bisect.bisect_left(curve, (rows, 0.0)), 1), len(curve) - 1)
        (r0, t0), (r1, t1) = curve[i - 1], curve[i]
        t = t0 + (t1 - t0) * (rows - r0) / (r1 - r0)
        return max(t, curve[0][1] * 0.5)  # below the first point: not under half its time

    def min_accept(self, tokens: float, rows: int) -> float:
        """The acceptance probability one more draft row needs to pay, in a step of `rows`
        rows expected to emit `tokens` tokens."""
        t = self.seconds(rows)
        return tokens * (self.seconds(rows + 1) - t) / t

    def _fit(self) -> None:
        for b in [b for b, t in self.times.items() if self.passes - t[-1][2] > STALE_PASSES]:
            del self.times[b]
        points = sorted((statistics.median(p[0] for p in t), statistics.median(p[1] for p in t))
                        for t in self.times.values() if len(t) >= MIN_SAMPLES)  # fmt: skip
        if len(points) < 2 or points[-1][0] - points[0][0] < SPREAD:
            self.k, self.fitted, self.curve = self.prior, False, []  # too few: the prior
            return
        points = _lower_hull(points)  # (two points at least: the hull keeps both ends)
        rows = [r for r, _ in points]
        # Non-decreasing, and a hair above an equal neighbour: T always grows with rows.
        secs = [points[0][1]]
        for _, t in points[1:]:
            secs.append(max(t, secs[-1] * (1.0 + 1e-6)))
        if points[-1][1] <= points[0][1]:
            self.k, self.fitted, self.curve = self.prior, False, []  # not rising: the prior
            return
        self.curve = list(zip(rows, secs))
        mr, mt = statistics.fmean(rows), statistics.fmean(secs)
        c = sum((r - mr) * (t - mt) for r, t in self.curve) / sum((r - mr) ** 2 for r in rows)
        fixed = mt - c * mr
        self.k = min(max(fixed / c, K_RANGE[0]), K_RANGE[1]) if fixed > 0 else K_RANGE[0]
        self.fitted = True


def _lower_hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lower convex hull of `points` (sorted by rows): a row's cost only grows with the
    rows (tiles fill, attention reads more), and a point above the hull is a stall of the
    machine or too few samples, not the cost of its rows."""
    hull: list[tuple[float, float]] = []
    for p in points:
        while len(hull) >= 2:
            (r0, t0), (r1, t1) = hull[-2], hull[-1]
            if (t1 - t0) * (p[0] - r0) >= (p[1] - t0) * (r1 - r0):  # hull[-1] on or above
                hull.pop()
            else:
                break
        hull.append(p)
    return hull
