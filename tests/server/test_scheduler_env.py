"""The scheduler process's environment: the OpenMP spin-wait default, and the user's choice
kept over it."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from radixrt.serve.http import scheduler_client
from radixrt.serve.http.args import parse_args
from radixrt.serve.http.scheduler_client import OMP_SPIN_ENV, SchedulerClient, scheduler_env


def test_the_spin_default_is_added_to_what_is_given() -> None:
    env = scheduler_env({"RADIXRT_DP_RANK": "1", "OMP_NUM_THREADS": "1"})
    assert env == {"RADIXRT_DP_RANK": "1", "OMP_NUM_THREADS": "1", **OMP_SPIN_ENV}


@pytest.mark.parametrize("chosen", [{"GOMP_SPINCOUNT": "300000"}, {"OMP_WAIT_POLICY": "active"}])
def test_a_spin_policy_the_user_chose_is_kept(chosen: dict[str, str]) -> None:
    assert scheduler_env({"A": "b", **chosen}) == {"A": "b", **chosen}


def test_none_inherits_this_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("RADIXRT_TEST_MARK", "1")
    env = scheduler_env(None)
    assert env["RADIXRT_TEST_MARK"] == "1"
    assert env["GOMP_SPINCOUNT"] == OMP_SPIN_ENV["GOMP_SPINCOUNT"]


def test_the_scheduler_process_starts_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class FakePopen:
        def __init__(self, cmd: list[str], **kwargs: Any) -> None:
            seen.update(kwargs)

        def poll(self) -> int:
            return 0

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(scheduler_client.subprocess, "Popen", FakePopen)
    client = SchedulerClient(parse_args(["--model-path", "fake"]), env={"A": "b"})
    try:
        client.start()
    finally:
        client.stop()
    assert seen["env"] == {"A": "b", **OMP_SPIN_ENV}
    assert seen["stdin"] is subprocess.DEVNULL
