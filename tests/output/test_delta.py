"""Output deltas: joined, they are the whole result (text, ids, logprobs), each holds only what is
new, and `take_text` holds tokens whose text is held back until there is text to show."""

from __future__ import annotations

from radixrt.core import FinishKind, FinishReason, SamplingParams
from radixrt.core.messages import ReqOutMsg
from radixrt.serve.results.delta import DeltaCursor
from radixrt.serve.results.detokenizer import IncrementalDetokenizer
from radixrt.serve.results.result import build_result
from radixrt.serve.results.state import ReqOutput


class CharTokenizer:
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(map(chr, ids))


def _request(stop: list[str]) -> tuple[ReqOutput, DeltaCursor, IncrementalDetokenizer]:
    sp = SamplingParams(return_logprob=True, top_logprobs_num=1, stop=stop)
    req = ReqOutput("r", [1, 2], sp, 0.0)
    detok = IncrementalDetokenizer(CharTokenizer(), stop=stop)
    return req, DeltaCursor(req, detok), detok


def _step(req: ReqOutput, char: str, finish: FinishReason | None = None) -> None:
    t = ord(char)
    req.apply(ReqOutMsg("r", [t], [-float(t)], [[(-1.0, t)]], None, 0))
    req.finish(finish)


def test_deltas_join_to_the_result_and_each_holds_only_what_is_new() -> None:
    req, cursor, _ = _request([])
    deltas = []
    for i, ch in enumerate("hello"):
        _step(req, ch, FinishReason(FinishKind.LENGTH) if i == 4 else None)
        delta = cursor.take()
        assert delta is not None and delta.token_ids == [ord(ch)] and delta.start == i
        deltas.append(delta)
    assert cursor.take() is None and deltas[-1].is_last and deltas[-1].end == 5
    whole = build_result(req, IncrementalDetokenizer(CharTokenizer()))
    assert "".join(d.text for d in deltas) == whole["text"] == "hello"
    assert [t for d in deltas for t in d.token_ids] == whole["output_ids"]
    logprobs = [lp for d in deltas for lp in d.logprobs]
    assert logprobs == [lp for lp, _, _ in whole["meta_info"]["output_token_logprobs"]]
    assert [len(d.top_logprobs) for d in deltas] == [1] * 5


def test_take_text_holds_tokens_while_their_text_may_become_a_stop_string() -> None:
    req, cursor, _ = _request(["##"])
    _step(req, "a")
    first = cursor.take_text()
    assert first is not None and first.text == "a"
    _step(req, "#")  # could start "##": held back
    assert cursor.take_text() is None
    _step(req, "b")  # it did not: the text and both tokens come together
    second = cursor.take_text()
    assert second is not None and second.text == "#b" and second.token_ids == [35, 98]
    assert second.start == 1 and second.text_start == 1
    _step(req, "#")
    _step(req, "#", FinishReason(FinishKind.STOP, matched="##"))
    last = cursor.take_text()
    assert last is not None and last.is_last and last.text == "" and last.end == 5
    assert cursor.take_text() is None
