"""Drafts from a request's predicted output (SamplingParams.prediction_ids, OpenAI's
`prediction`): the text the caller expects the output to repeat for the most part, such as
the file an edit rewrites.

`PredictionIndex` keeps where the output stands in the prediction: a cursor, the prediction
position where the last draft it gave started. The first draft is the prediction's start.
Later ones follow the latest output tokens: the longest suffix of them (up to max_n tokens)
that occurs in the prediction, at its first occurrence at or after the cursor (else before
it), and the draft is what follows it there. So where the output leaves the prediction
(a renamed variable) and comes back to it, drafting resumes after the change, and a line that
occurs twice is taken in order.

`PredictedDrafter` puts a prediction first: a request with one drafts from it while it has a
match, and from the configured drafter otherwise (none with speculation off, where a
prediction is the only source). Its drafts are marked on the request (`Req.draft_predicted`)
so their acceptance is counted for the request alone (usage's accepted and rejected
prediction tokens), never in the engine's rates: one caller's wrong predictions do not
shorten anyone else's drafts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict

from radixrt.core import Req
from radixrt.core.forward_batch import MAX_ROWS_PER_REQUEST
from radixrt.scheduler.speculative.drafter import BaseDrafter
from radixrt.scheduler.speculative.rows import forced_rows
from radixrt.scheduler.speculative.tree import DraftTree, chain

# The most tokens a prediction drafts per step (or speculative_num_draft_tokens, if more):
# all but one of the rows a pass decodes per request. The step's allotment cuts it to what
# pays on the measured pass times and the request's acceptance of its prediction.
PREDICTION_DRAFT_TOKENS = MAX_ROWS_PER_REQUEST - 1
PREDICTION_NGRAM_MAX = 4  # the longest output suffix matched in the prediction
# Occurrences of the output's last token tried on each side of the cursor: a token frequent
# in the prediction (a newline, an indent) is matched near where the output stands.
CANDIDATES = 64
# Predictions whose positions are kept for the next request, the latest first: at most this
# many, holding at most RECENT_PREDICTION_TOKENS tokens in all (one longer is not kept).
RECENT_PREDICTIONS = 8
RECENT_PREDICTION_TOKENS = 65536


def positions_after(tokens: list[int]) -> dict[int, list[int]]:
    """Each token -> the sorted positions right after its occurrences in `tokens`."""
    after: dict[int, list[int]] = {}
    for end, tok in enumerate(tokens):
        after.setdefault(tok, []).append(end + 1)
    return after


class PredictionIndex:
    """A prediction's tokens -> the sorted positions right after each of their occurrences,
    and the cursor (on `req.prediction` of a request with a prediction: made on its first
    draft, in one pass over the tokens, so a prediction as long as the context costs
    milliseconds, not an index of every n-gram)."""

    def __init__(
        self,
        tokens: list[int],
        max_n: int = PREDICTION_NGRAM_MAX,
        after: dict[int, list[int]] | None = None,
    ) -> None:
        """`after`: positions_after(tokens), when another index of the same tokens has it
        (read only: indexes of the samples of n share it, each with its own cursor)."""
        self.tokens = tokens
        self.max_n = max_n
        self.cursor = 0  # the prediction position where the last draft started
        self._after = positions_after(tokens) if after is None else after

    def draft(self, output: list[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` prediction tokens expected after `output` ([] when its last
        token occurs nowhere in the prediction, or only at its end)."""
        if max_tokens <= 0:
            return []
        if not output:
            start = 0
        else:
            found = self._find(output)
            if found is None:
                return []
            start = found
        self.cursor = start
        return self.tokens[start : start + max_tokens]

    def _find(self, output: list[int]) -> int | None:
        """The position after the longest suffix of `output` (max_n tokens at most) found in
        the prediction: among the occurrences of its last token, CANDIDATES at or after the
        cursor, then CANDIDATES before it, the first with the longest match; None when the
        last token does not occur before the prediction's end."""
        starts = self._after.get(output[-1])
        if not starts:
            return None
        i = bisect_left(starts, self.cursor)
        best, best_n = None, 0
        for start in starts[i : i + CANDIDATES] + starts[max(0, i - CANDIDATES) : i]:
            if start >= len(self.tokens):
                continue
            if start < self.cursor and best is not None:
                break  # one behind the output's place only where none is ahead of it
            n = 1
            while (n < self.max_n and n < len(output) and start - 1 - n >= 0
                   and self.tokens[start - 1 - n] == output[-1 - n]):  # fmt: skip
                n += 1
            if start < self.cursor and n < 2:
                continue  # behind the cursor a single token is no evidence of the place
            if n > best_n:
                best, best_n = start, n
                if n == self.max_n:
                    break
        return best


class PredictedDrafter(BaseDrafter):
    """A request's prediction first, then `inner` (the configured drafter, or NoDrafter)."""

    def __init__(self, inner: BaseDrafter) -> None:
        self.inner = inner
        self.trusts_matches = inner.trusts_matches  # a request with a prediction: `trusts`
        # The positions of the predictions indexed last (the samples of n and a client's
        # repeated requests carry the same one): built once, read by each request's index.
        self._recent: OrderedDict[tuple[int, ...], dict[int, list[int]]] = OrderedDict()

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        draft = self._predicted(req, max_tokens)
        if draft:
            return draft
        return self.inner.propose(req, max_tokens)

    def propose_batch(self, reqs: list[Req], max_tokens: list[int],
                      inner_tokens: list[int] | None = None) -> list[list[int]]:  # fmt: skip
        """The predicted drafts, and the inner drafter's (a draft model's in one pass) for
        the requests whose prediction has none this step, each within `inner_tokens` (else
        `max_tokens`): what it would be asked without a prediction."""
        out = [self._predicted(r, n) for r, n in zip(reqs, max_tokens)]
        within = max_tokens if inner_tokens is None else inner_tokens
        # A drafter that does not trust matches (a draft model) drafts after computed tokens
        # only: not after forced ones (it is asked there only because of the prediction).
        rest = [i for i, d in enumerate(out)
                if not d and within[i] > 0
                and (self.inner.trusts(reqs[i]) or forced_rows(reqs[i]) == 0)]  # fmt: skip
        if rest:
            asked = [within[i] for i in rest]
            drafts = self.inner.propose_batch([reqs[i] for i in rest], asked)
            for i, d in zip(rest, drafts):
                out[i] = d
        return out

    def trusts(self, req: Req) -> bool:
        return bool(req.sampling_params.prediction_ids) or self.inner.trusts(req)

    def trusted(self, req: Req) -> bool:
        return req.draft_predicted or self.inner.trusted(req)

    def trim(self, req: Req, draft: list[int], cap: int) -> list[int]:
        return draft if req.draft_predicted else self.inner.trim(req, draft, cap)

    def propose_tree(self, req: Req, max_depth: int, max_nodes: int,
                     max_branches: int) -> DraftTree:  # fmt: skip
        draft = self._predicted(req, min(max_depth, max_nodes))
        if draft:
            return chain(draft)
        return self.inner.propose_tree(req, max_depth, max_nodes, max_branches)

    def alternatives(self, req: Req, max_tokens: int, count: int) -> list[list[int]]:
        return [] if req.draft_predicted else self.inner.alternatives(req, max_tokens, count)

    def _predicted(self, req: Req, max_tokens: int) -> list[int]:
        """Its prediction's draft after its output ([] without a prediction or a match);
        sets req.draft_predicted to whether there is one."""
        tokens = req.sampling_params.prediction_ids
        req.draft_predicted = False
        if not tokens or max_tokens <= 0:
            return []
        if not isinstance(req.prediction, PredictionIndex):
            req.prediction = self._index(tokens)
        draft = req.prediction.draft(req.output_ids, max_tokens)
        req.draft_predicted = bool(draft)
        return draft

    def _index(self, tokens: list[int]) -> PredictionIndex:
        """A new index (its own cursor) over positions shared with the recent ones."""
        key = tuple(tokens)
        after = self._recent.get(key)
        if after is not None:
            self._recent.move_to_end(key)
            return PredictionIndex(tokens, after=after)
        after = positions_after(tokens)
        if len(key) <= RECENT_PREDICTION_TOKENS:
            self._recent[key] = after
            while (len(self._recent) > RECENT_PREDICTIONS
                   or self._recent_tokens > RECENT_PREDICTION_TOKENS):  # fmt: skip
                self._recent.popitem(last=False)
        return PredictionIndex(tokens, after=after)

    @property
    def _recent_tokens(self) -> int:
        """The tokens of the recent predictions kept (at most RECENT_PREDICTIONS keys)."""
        return sum(len(key) for key in self._recent)
