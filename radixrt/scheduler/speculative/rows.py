"""Verification rows: the sampler rows of a speculating request, each the step a decode would
take after the drafted tokens before it, and the seeded generators put back where one-token
steps would have left them.

Why sampling stays exact: row j draws its token x_j from its own processed distribution p_j
(temperature, penalties, top-k/top-p/min-p as the sampler applies them), and the draft d_j is
accepted when x_j == d_j, so with probability p_j(d_j); on rejection x_j is emitted, which is a
draw from p_j with d_j removed and renormalised. Every emitted token is thus a draw from its
row's distribution, as without speculation, and a seeded row draws with the very uniform a
one-token step would have used (one per emitted token), so seeded output is unchanged too.
"""

from __future__ import annotations

import torch

from radixrt.core import Req
from radixrt.executor.draws import request_generator


def forced_rows(req: Req) -> int:
    """The rows of `req`'s step before its verifying rows: the tokens jump-forward appended
    after its last pick (its grammar forced them; uncomputed, already in its output), which
    the step computes first (0 for a request that decodes one token); for a step that ends
    the prompt, the prompt's rows before its last token."""
    return req.seq_len - 1 - req.kv_len


def row_reqs(req: Req) -> list[Req]:
    """The 1 + len(draft_ids) sampler rows of `req`: row j sees the output as if the drafted
    tokens up to node j were accepted (a chain: the first j; a tree: node j's path; penalties
    count them; min_new_tokens bans stop tokens on the rows still under it). Rows share req's
    sampling params and generator; where the output changes nothing the sampler reads, every
    row is `req` itself."""
    n = 1 + len(req.draft_ids)
    p = req.sampling_params
    if not _reads_output(req):
        return [req] * n
    rows = [req]
    for j in range(1, n):
        view = Req(req.rid, req.input_ids, p, output_ids=req.output_ids + _drafted_to(req, j))
        view.generator = req.generator
        rows.append(view)
    return rows


def _drafted_to(req: Req, j: int) -> list[int]:
    """The drafted tokens on the way to draft node j (a chain: the first j; a tree: its path
    from the root, each node's own output as if accepted)."""
    if not req.draft_parents:
        return req.draft_ids[:j]
    out: list[int] = []
    while j:
        out.append(req.draft_ids[j - 1])
        j = req.draft_parents[j - 1]
    return out[::-1]


def _reads_output(req: Req) -> bool:
    """Whether the sampler's work on `req` depends on its output tokens: penalties, or a
    min_new_tokens ban that a draft row may be past (or still under)."""
    p = req.sampling_params
    return (
        p.repetition_penalty != 1.0
        or p.frequency_penalty != 0.0
        or p.presence_penalty != 0.0
        or len(req.output_ids) < p.min_new_tokens
    )


class SeededDraws:
    """The generators of the seeded requests in a verification, as they were before it: the
    sampler draws one uniform per row, but a one-token step draws one per emitted token, so
    after acceptance each generator is put back and advanced by its emitted count."""

    def __init__(self, reqs: list[Req], device: torch.device) -> None:
        self.device = device
        # Generators are made here, before the rows copy the reference (rows share it).
        self._before = {
            id(req): request_generator(req, device).get_state()
            for req in reqs
            if req.sampling_params.seed is not None and not req.sampling_params.is_greedy
        }

    def settle(self, req: Req, emitted: int) -> None:
        """Leave `req`'s generator as `emitted` one-token steps would have."""
        state = self._before.get(id(req))
        if state is None:
            return
        gen = request_generator(req, self.device)  # made in __init__, before `state` was taken
        gen.set_state(state)
        for _ in range(emitted):
            torch.rand(1, generator=gen, device=self.device)
