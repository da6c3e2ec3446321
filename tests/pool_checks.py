"""Checks every test that runs requests ends with: the KV pools whole, the tree sound. Import
it from here (tests/lang/conftest.py shadows `conftest` for the folders collected after it)."""

from __future__ import annotations


def assert_pool_whole(engine) -> None:
    """free + evictable + protected == capacity (and the window pool whole), nothing running."""
    sched = engine.scheduler
    assert sched.is_idle, "requests still queued or running"
    sched.kv.check_whole()
    sched.kv.cache.check_integrity()
