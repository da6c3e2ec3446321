"""LocalServer: start a radixrt server in a child process for examples and notebooks.

Only a subprocess is started (`python -m radixrt.launch_server`); nothing of the runtime is
imported here, so the caller stays free of torch.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from radixrt_lang.backends.runtime_endpoint import RuntimeEndpoint

START_TIMEOUT_S = 300.0


class LocalServer:
    """`with LocalServer(max_total_tokens=4096) as backend:` a RuntimeEndpoint on a free port.

    Keyword arguments become `--flag value` options (`True` gives a bare `--flag`). The log
    goes to a temporary file (`log_path`); the process group is killed on exit."""

    def __init__(self, model_path: str | None = None, **flags: Any) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "radixrt.launch_server", "--port", str(self.port)]
        if model_path is not None:
            self.cmd += ["--model-path", model_path]
        for key, value in flags.items():
            flag = "--" + key.replace("_", "-")
            self.cmd += [flag] if value is True else [flag, str(value)]
        self.log_path = tempfile.mkstemp(prefix="radixrt-server-", suffix=".log")[1]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RuntimeEndpoint:
        """Start and wait until /health answers; raises RuntimeError with the log's tail."""
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        atexit.register(self.stop)  # e.g. a notebook kernel shut down before stop() ran
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return RuntimeEndpoint(self.url)
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the server did not start in {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self) -> None:
        """SIGTERM the server's process group, then SIGKILL what is left."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def __enter__(self) -> RuntimeEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def connect_or_launch(url: str | None = None, **flags: Any) -> Iterator[RuntimeEndpoint]:
    """A RuntimeEndpoint for `url`, or for a LocalServer started (and stopped) here."""
    if url:
        yield RuntimeEndpoint(url)
        return
    with LocalServer(**flags) as backend:
        yield backend


def example_main(main: Callable[[RuntimeEndpoint], None], description: str) -> None:
    """The command line of the examples: `--url URL` uses a running server, else one is
    started for the run (SmolLM2 with a 4096-token KV pool)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", help="a running radixrt server (default: start one)")
    args = parser.parse_args()
    with connect_or_launch(args.url, max_total_tokens=4096) as backend:
        main(backend)
