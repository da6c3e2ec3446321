"""FinishChecker's stop strings: matched incrementally, so a step's decode cost does not grow
with the output; EOS (after min_new_tokens), then stop strings, then length."""

from __future__ import annotations

from radixrt.core import FinishKind, Req, SamplingParams
from radixrt.scheduler.stop_check import FinishChecker

EOS = 0
WORDS = ["", " the", " cat", " sat", "ST", "OP", "\n"]  # id 0 (EOS) decodes to nothing


class CountingTokenizer:
    def __init__(self) -> None:
        self.decoded_tokens: list[int] = []

    def decode(self, ids: list[int]) -> str:
        self.decoded_tokens.append(len(ids))
        return "".join(WORDS[i] for i in ids)


def make(stop: list[str], **kw: int) -> tuple[FinishChecker, CountingTokenizer, Req]:
    tok = CountingTokenizer()
    params = SamplingParams(stop=stop, max_new_tokens=kw.pop("max_new_tokens", 10_000), **kw)
    return FinishChecker([EOS], tok.decode), tok, Req("r", [1, 2], params)


def test_cost_per_step_does_not_grow_with_output() -> None:
    finish, tok, req = make(["STOP"])
    for i in range(2000):
        req.output_ids.append(1 + i % 3)
        finish.check(req, context_len=1 << 20)
        assert not req.is_finished
    assert max(tok.decoded_tokens) <= 2 and sum(tok.decoded_tokens) <= 3 * 2000
    req.output_ids.append(4)  # "ST": held, not yet a match
    finish.check(req, context_len=1 << 20)
    assert not req.is_finished
    req.output_ids.append(5)
    finish.check(req, context_len=1 << 20)
    assert req.finish_reason is not None and req.finish_reason.matched == "STOP"


def test_several_tokens_between_checks() -> None:
    finish, _, req = make(["OP\n"])
    req.output_ids += [1, 4, 5]  # e.g. appended together before one check
    finish.check(req, context_len=100)
    assert not req.is_finished
    req.output_ids += [6]
    finish.check(req, context_len=100)
    assert req.finish_reason is not None and req.finish_reason.matched == "OP\n"


def test_eos_waits_for_min_new_tokens_then_stop_then_length() -> None:
    finish, _, req = make(["cat"], min_new_tokens=3, max_new_tokens=4)
    req.output_ids.append(EOS)
    finish.check(req, context_len=100)
    assert not req.is_finished  # EOS before min_new_tokens is ignored
    req.output_ids.append(2)
    finish.check(req, context_len=100)
    assert req.finish_reason is not None and req.finish_reason.matched == "cat"

    finish, _, req = make(["dog"], max_new_tokens=2)
    req.output_ids += [1]
    finish.check(req, context_len=100)
    req.output_ids += [EOS]
    finish.check(req, context_len=100)
    assert req.finish_reason is not None and req.finish_reason.matched == EOS

    finish, _, req = make(["dog"], max_new_tokens=2)
    for t in (1, 2):
        req.output_ids.append(t)
        finish.check(req, context_len=100)
    assert req.finish_reason is not None and req.finish_reason.kind == FinishKind.LENGTH
