"""A reasoning gate in the scheduler (grammar/reasoning_gate.py): the thinking budget forces
the end token, a grammar holds the answer after it, greedy tokens identical with and without
speculation (drafts walked through the gate), the pool whole after every step."""

from __future__ import annotations

import json
import random

import pytest
from test_speculative import _build

from radixrt.core import Req, SamplingParams
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost

END, START = 1000, 1001  # ordinary tokens standing for </think> and <think>
SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                     "required": ["ok"], "additionalProperties": False})  # fmt: skip


def _run(s, reqs: list[Req]) -> dict[str, list[int]]:
    """Step until idle, the pool checked after every step: a request that ended on a token
    its grammar forced (EOS) holds its slots while its tail is computed (`closing`)."""
    for r in reqs:
        s.add_request(r)
    while not s.is_idle:
        s.step()
        held = sum(s.kv.slots_held(r) for r in [*s.running, *s.closing])
        s.kv.check_whole(held)
        s.kv.cache.check_integrity()
    s.check_pool_whole()
    assert s.kv.cache.protected_size == 0  # nothing locked once idle
    return {r.rid: r.output_ids for r in reqs}


def _prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 49000) for _ in range(12)] * 4  # lookup drafts find repeats


CASES = [  # (name, sampling fields)
    ("budget", dict(reasoning_end_id=END, thinking_token_budget=6)),
    ("budget0", dict(reasoning_end_id=END, thinking_token_budget=0)),
    ("schema", dict(reasoning_end_id=END, json_schema=SCHEMA)),
    ("schema_budget", dict(reasoning_end_id=END, thinking_token_budget=3, json_schema=SCHEMA)),
    ("opened", dict(reasoning_end_id=END, reasoning_start_id=START, regex="(yes|no)")),
]


def _reqs() -> list[Req]:
    out = []
    for i, (name, fields) in enumerate(CASES):
        sp = SamplingParams(max_new_tokens=24, temperature=0, **fields)  # type: ignore[arg-type]
        out.append(Req(name, _prompt(i), sp))
    return out


@pytest.fixture(scope="module")
def schedulers(tiny_llama_path):
    plain = _build(tiny_llama_path, 0)
    spec = _build(tiny_llama_path, 4)
    spec.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])  # drafts made
    return plain, spec


def test_the_gate_in_the_scheduler(schedulers, tiny_llama_path) -> None:
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(tiny_llama_path)
    plain, spec = schedulers
    want = _run(plain, _reqs())
    reqs = _reqs()
    got = _run(spec, reqs)
    assert got == want
    assert sum(r.spec_accepted for r in reqs) > 0  # drafts walked through the gates
    budget, zero = want["budget"], want["budget0"]
    assert budget.index(END) <= 6 and zero[0] == END and len(zero) == 24
    for name in ("schema", "schema_budget"):
        out = want[name]
        answer = tok.decode(out[out.index(END) + 1 :], skip_special_tokens=True)
        assert json.loads(answer) in ({"ok": True}, {"ok": False}), (name, out)
    assert want["schema_budget"].index(END) <= 3
    opened = want["opened"]
    tail = opened[opened.index(END) + 1 :] if opened[0] == START else opened
    assert tok.decode(tail, skip_special_tokens=True) in ("yes", "no"), opened
