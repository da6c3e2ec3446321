"""The server's processes as /proc shows them: each descendant of the HTTP process and the module
it runs, and their resident memory (VmRSS) summed per role. Linux only; a process that is gone
reads as nothing."""

from __future__ import annotations

import os
from pathlib import Path

Rss = dict[str, dict[str, int]]  # role -> {"kib": VmRSS summed, "procs": processes}


def server_rss(pid: int) -> Rss:
    """VmRSS of the HTTP process (`http`) and of its descendants, summed per module they run
    (`radixrt.scheduler.process`, `radixrt.grammar.worker`, ...)."""
    rss = {"http": {"kib": _vmrss(pid), "procs": 1}}
    for child, module in descendants(pid):
        role = rss.setdefault(module, {"kib": 0, "procs": 0})
        role["kib"] += _vmrss(child)
        role["procs"] += 1
    return rss


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, module it runs) of every descendant of `pid`."""
    out: list[tuple[int, str]] = []
    todo = _children(pid)
    while todo:
        child = todo.pop()
        out.append((child, _module(child)))
        todo += _children(child)
    return out


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return out


def _module(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    name = argv[argv.index(b"-m") + 1] if b"-m" in argv[:-1] else os.path.basename(argv[0])
    return name.decode(errors="replace") or "?"


def _vmrss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
