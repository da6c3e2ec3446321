"""The soak's scheduler pauses: SIGSTOP the server's scheduler process(es) mid-load, hold, then
SIGCONT, as a stuck disk, a debugger or a host under memory pressure would. Requests sent
meanwhile must wait and then be answered; /health (answered by the HTTP process) must stay fast;
nothing may be lost. Pauses stay under the server's stall timeout, where the server is meant to
wait rather than give up (the stall path itself is tests/server/test_server_stall.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

from benchmarks.soak.rss import descendants

SCHEDULER_MODULE = "radixrt.scheduler.process"


@dataclass
class PauseLog:
    """What the pauser did; read after it is joined."""

    pids: list[int] = field(default_factory=list)  # the scheduler processes found
    count: int = 0  # pauses completed (stopped, then continued)
    seconds: float = 0.0  # total time stopped
    error: str = ""  # why pausing stopped early, if it did


class Pauser(threading.Thread):
    """Every `every_s`, stops the scheduler processes under `server_pid` for `hold_s`.

    The SIGCONT is sent in a `finally`: however this thread ends (stop event, error), it
    never leaves a process stopped."""

    def __init__(self, server_pid: int, every_s: float, hold_s: float) -> None:
        super().__init__(daemon=True)
        self.server_pid, self.every_s, self.hold_s = server_pid, every_s, hold_s
        self.stop = threading.Event()
        self.log = PauseLog()

    def run(self) -> None:
        found = descendants(self.server_pid)
        self.log.pids = [pid for pid, module in found if module == SCHEDULER_MODULE]
        if not self.log.pids:
            self.log.error = f"no {SCHEDULER_MODULE} process under pid {self.server_pid}"
            return
        while not self.stop.wait(self.every_s):
            stopped: list[int] = []
            start = time.monotonic()
            try:
                for pid in self.log.pids:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                self.stop.wait(self.hold_s)
            except OSError as e:  # a scheduler gone: the soak's checks will say so
                self.log.error = f"SIGSTOP: {type(e).__name__}: {e}"
                return
            finally:
                for pid in stopped:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except OSError:
                        pass
            self.log.count += 1
            self.log.seconds += time.monotonic() - start
