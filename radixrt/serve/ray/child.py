"""A watchdog between a Ray replica and its radixrt server:

    python -m radixrt.serve.ray.child PARENT_PID COMMAND...

runs COMMAND in its own process group and ends that group (SIGTERM, then SIGKILL after 20 s)
when PARENT_PID is no longer its parent (the replica died, however) or when it is told to
stop itself. Exits with the command's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType


def main(argv: list[str]) -> int:
    parent, cmd = int(argv[0]), argv[1:]
    proc = subprocess.Popen(cmd, start_new_session=True)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while proc.poll() is None:
        if stopping or os.getppid() != parent:
            _end(proc)
            break
        time.sleep(0.5)
    return proc.wait()


def _end(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
