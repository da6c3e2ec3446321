"""The systems compared by the benchmark suite, each started as its own server process.

`SYSTEMS` names the launch command of each; `ManagedServer` starts one on a free port in its
own process group (logging to a file), waits for /v1/models, and kills the group on exit,
returning once every process of the group is gone (a peer's engine process that outlived its
server would share the cores with the next system measured).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

START_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class System:
    name: str  # as printed in the tables
    backend: str  # "radixrt" (native /generate) or "openai"
    kind: str  # "radixrt", "llama.cpp" or "transformers"
    flags: tuple[str, ...] = ()  # extra radixrt server flags

    @property
    def is_radixrt(self) -> bool:
        return self.kind == "radixrt"


RADIXRT = System("radixrt", "radixrt", "radixrt")
RADIXRT_OFF = System("radixrt cache off", "radixrt", "radixrt", ("--disable-radix-cache",))
LLAMA_CPP = System("llama.cpp", "openai", "llama.cpp")
TRANSFORMERS = System("transformers", "openai", "transformers")
SYSTEMS = {s.name: s for s in (RADIXRT, RADIXRT_OFF, LLAMA_CPP, TRANSFORMERS)}


def page_size_system(page_size: int) -> System:
    """radixrt with the radix cache on at `page_size` tokens per page."""
    return System(
        f"radixrt page {page_size}", "radixrt", "radixrt", ("--page-size", str(page_size))
    )


def llama_cpp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def launch_command(
    system: System, port: int, model_path: str | None, gguf: Path, threads: int
) -> list[str]:
    """The command line that serves `system` on 127.0.0.1:port."""
    py = sys.executable
    if system.kind == "radixrt":
        model = ["--model-path", model_path] if model_path else []
        return [
            py,
            "-m",
            "radixrt.launch_server",
            *model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *system.flags,
        ]
    if system.kind == "transformers":
        model = ["--model-path", model_path] if model_path else []
        return [py, "-m", "benchmarks.peers.hf_server", *model, "--port", str(port)]
    return [
        py,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "8192",
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--cache",
        "true",
        "--interrupt_requests",
        "false",
        "--model_alias",
        "llama.cpp",
        "--verbose",
        "false",
    ]


class ManagedServer:
    """A server process for one system; `with ManagedServer(...) as url:`."""

    def __init__(
        self,
        cmd: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        ready_path: str = "/v1/models",  # answers 200 once up (without keys: /health)
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.ready_path = ready_path
        self.start_timeout_s = start_timeout_s
        self.port = int(cmd[cmd.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = cmd
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}  # this process's environment, plus `env`
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.url

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                if _group_gone(self.proc, wait_s):
                    break
            self._log.close()

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.cmd[2]} exited with {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{' '.join(self.cmd)} not ready after {self.start_timeout_s} s")


def _group_gone(proc: subprocess.Popen[bytes], wait_s: float) -> bool:
    """Whether every process of `proc`'s group (its id is the leader's pid) has exited
    within `wait_s`; the leader is reaped on the way."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # a member that changed its user: still there
        time.sleep(0.1)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eos_logit_bias(model_path: str | None) -> dict[str, Any]:
    """OpenAI `logit_bias` forbidding the EOS and other special ids (llama.cpp has no
    `ignore_eos`, and it also ends a request on <|endoftext|>-like tokens)."""
    from radixrt.model.families.loader import eos_token_ids, load_tokenizer, resolve_model_path

    folder = resolve_model_path(model_path)
    tok = load_tokenizer(folder)
    ids = [*eos_token_ids(folder, tok), *getattr(tok, "all_special_ids", [])]
    return {"logit_bias": {str(t): -100.0 for t in dict.fromkeys(ids)}}
