"""PromptGuard's causes on token lists (no server): which turn breaks, where, and why."""

from __future__ import annotations

from radixrt.serve.http.prompt_guard import PromptGuard


class _Metrics:
    def __init__(self) -> None:
        self.causes: list[str] = []

    def observe_prefix_break(self, cause: str) -> None:
        self.causes.append(cause)


SYS = {"role": "system", "content": "s"}
SYS2 = {"role": "system", "content": "t"}
U1 = {"role": "user", "content": "u1"}
A1 = {"role": "assistant", "content": "a1"}
U2 = {"role": "user", "content": "u2"}
KEY = ("caller", "session")


def _guard() -> tuple[PromptGuard, _Metrics]:
    metrics = _Metrics()
    guard = PromptGuard(metrics)
    guard.record(KEY, [SYS, U1], [1, 2, 3, 4], [5, 6])
    return guard, metrics


def test_each_cause_at_its_offset() -> None:
    cases = [
        ([SYS, U1, A1, U2], [1, 2, 3, 4, 5, 6, 7], None),  # extends it: no break
        ([SYS, U1, A1, U2], [1, 2, 3, 4, 9, 6, 7], ("assistant_turn_rewritten", 4)),
        (
            [{"role": "system", "content": "t"}, U1, A1],
            [1, 8, 3, 4, 5, 6],
            ("system_prompt_changed", 1),
        ),
        ([SYS, U1, A1], [1, 2, 8, 4, 5, 6], ("template_changed", 2)),
        ([SYS, {"role": "user", "content": "other"}], [1, 2, 8], None),  # a new conversation
    ]
    for messages, ids, want in cases:
        guard, metrics = _guard()
        found = guard.check(KEY, messages, ids)
        assert (None if found is None else (found.cause, found.offset)) == want, messages
        assert metrics.causes == ([] if want is None else [want[0]])


def test_a_rewritten_earlier_turn_and_other_sessions() -> None:
    guard, metrics = _guard()
    guard.record(KEY, [SYS, U1, A1, U2], [1, 2, 3, 4, 5, 6, 7], [8])
    found = guard.check(
        KEY, [SYS, U1, {"role": "assistant", "content": "x"}, U2, A1], [1, 2, 3, 4, 9]
    )
    assert found is not None and found.cause == "history_rewritten" and found.offset == 4
    assert guard.check(("caller", "other"), [SYS, U1], [7, 7]) is None  # never seen
    assert guard.check(("someone else", "session"), [SYS, U1], [7, 7]) is None


def test_stable_json_renders_the_same_data_the_same_way() -> None:
    import radixrt as rt

    a = {"tools": [{"name": "calc", "args": {"y": 1, "x": 2}}], "v": "é"}
    b = {"v": "é", "tools": [{"args": {"x": 2, "y": 1}, "name": "calc"}]}
    assert rt.stable_json(a) == rt.stable_json(b)
    assert rt.stable_json(a) == '{"tools": [{"args": {"x": 2, "y": 1}, "name": "calc"}], "v": "é"}'
