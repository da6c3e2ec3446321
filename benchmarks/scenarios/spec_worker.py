"""One engine of `python -m benchmarks spec`, in a process of its own.

Two Engines in one process have two OpenMP thread pools (each loads and steps on its own
scheduler thread), and libgomp, with more OpenMP threads than cores, throttles its
spin-waits: every parallel region then pays a futex wake-up. Measured on 2 cores, an idle
second Engine made the first decode 8 chat streams at 500 instead of 840 tokens/s (28,000
voluntary context switches instead of 500), and not by the same factor for a speculating
engine (fewer, larger passes): ratios between engines in one process are skewed. So each
engine runs here, and the benchmark's process takes turns sending them batches.

Protocol (JSON lines, no pickle): the child's argument is the Engine's keyword arguments;
each stdin line {"prompts": [...], "params": {...}, "warm": bool} is answered by one stdout
line {"seconds": s, "outputs": [{"output_ids", "meta_info"}]} (the cache flushed first, then
with "warm" the prompts alone computed and cached, untimed; the batch submitted together and
timed), or {"error": message}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import IO, Any

# The child's program (not a `__main__` module: benchmarks/ runs those as benchmarks).
CHILD = "import sys; from benchmarks.scenarios.spec_worker import child; child(sys.argv[1])"


class EngineProcess:
    """An Engine in a child process (this module's `serve`); a context manager."""

    def __init__(self, engine_kwargs: dict[str, Any], cached_prompts: bool = False) -> None:
        self.cached_prompts = cached_prompts  # each batch's prompts cached before it is timed
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(engine_kwargs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def measure(self, prompts: list[str], params: dict[str, Any]) -> tuple[float, list[Any]]:
        """Seconds to answer `prompts` together (the cache flushed first) and the outputs."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        job = {"prompts": prompts, "params": params, "warm": self.cached_prompts}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the engine process exited ({self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["seconds"], reply["outputs"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(engine_kwargs: dict[str, Any], lines: IO[str], out: IO[str]) -> None:
    """Answer each batch line of `lines` on `out` until it closes."""
    from radixrt.serve.engine import Engine

    with Engine(**engine_kwargs) as engine:
        for line in lines:
            job = json.loads(line)
            engine.flush_cache()
            try:
                if job.get("warm"):  # the prompts alone cached: no output to draft from
                    engine.generate(job["prompts"], {"max_new_tokens": 0})
                t0 = time.perf_counter()
                outs = engine.generate(job["prompts"], job["params"])
                assert isinstance(outs, list)  # a list of prompts: one result each
            except Exception as e:  # the batch's error goes back; the engine stays
                out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
                out.flush()
                continue
            seconds = time.perf_counter() - t0
            kept = [{"output_ids": o["output_ids"], "meta_info": o["meta_info"]} for o in outs]
            out.write(json.dumps({"seconds": seconds, "outputs": kept}) + "\n")
            out.flush()


def child(engine_kwargs: str) -> None:
    """The child process: `serve` on stdin and the original stdout."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else written to stdout, from Python or C, goes to stderr
    sys.stdout = sys.stderr
    serve(json.loads(engine_kwargs), sys.stdin, protocol)
