"""The prompt guard's memory (docs/reliability.md): a byte budget over every session, a cap
per caller, hashes instead of text, and logs without prompt text or session ids."""

from __future__ import annotations

import logging

from radixrt.serve.http.prompt_guard import PromptGuard

SECRET = "the launch code is 1234"
SYS = {"role": "system", "content": "You help."}


class _Metrics:
    def __init__(self) -> None:
        self.causes: list[str] = []

    def observe_prefix_break(self, cause: str) -> None:
        self.causes.append(cause)


def _turn(i: int) -> list[dict[str, str]]:
    return [SYS, {"role": "user", "content": f"{SECRET} ({i})"}]


def test_every_session_together_stays_within_the_byte_budget() -> None:
    guard = PromptGuard(_Metrics(), max_bytes=2**20, max_per_caller=10**6)
    prompt = list(range(4000))  # 4000 tokens a session: 16 KB of hashes each
    for i in range(500):  # 500 sessions (8 MB of hashes) from many callers
        guard.record((f"addr:{i % 50}", f"s{i}"), _turn(i), prompt, [7] * 100)
        assert guard.nbytes <= 2**20
    assert 0 < len(guard) < 70  # the most recent ones, within 1 MiB
    last = guard.check(("addr:49", "s499"), _turn(499), [*prompt, 9])  # still followed
    assert last is not None and last.offset == 4000


def test_one_caller_cannot_push_out_the_others() -> None:
    metrics = _Metrics()
    guard = PromptGuard(metrics, max_per_caller=8, max_sessions=16)
    guard.record(("tenant:quiet", "mine"), _turn(0), [1, 2, 3], [4])
    for i in range(1000):  # cheap sessions under keys the noisy caller makes up
        guard.record(("tenant:noisy", f"made-up-{i}"), _turn(i), [1, 2], [3])
    assert len(guard) == 9  # eight of the noisy caller's, and the quiet one's
    found = guard.check(("tenant:quiet", "mine"), _turn(0), [1, 2, 9])
    assert found is not None and found.cause == "template_changed" and found.offset == 2
    assert guard.check(("tenant:noisy", "made-up-0"), _turn(0), [9]) is None  # forgotten
    assert guard.check(("tenant:noisy", "made-up-999"), _turn(999), [9]) is not None


def test_only_hashes_are_kept_and_logs_hold_no_text(caplog) -> None:
    guard = PromptGuard(_Metrics())
    ids = [ord(c) for c in SECRET]
    guard.record(("addr:1", "session-secret-id"), _turn(1), ids, [5, 6])
    held = repr(guard._turns) + repr(guard._by_caller)
    assert SECRET not in held and "session-secret-id" not in held
    turn = next(iter(guard._turns.values()))
    assert list(turn.prefix) != ids + [5, 6] and all(len(m) == 8 for m in turn.messages)
    with caplog.at_level(logging.WARNING, logger="radixrt"):
        found = guard.check(("addr:1", "session-secret-id"), _turn(1), [*ids[:5], 0])
    assert found is not None and found.offset == 5
    assert "token 5" in caplog.text
    assert "session-secret-id" not in caplog.text and "launch" not in caplog.text
