"""`make demo`: start the server with the default model, send a few chat requests (one twice,
to show the prefix cache at work), print the answers and the server's cache figures, run two
frontend-language programs against it, and stop it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the moon.",
    "What is 12 times 12?",
]
SYSTEM = (
    "You are a concise assistant. Answer in one short sentence. Be accurate, be polite, and "
    "never make up facts you are unsure about."
)
START_TIMEOUT_S = 600.0  # the first run converts the GGUF file once


def main() -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "radixrt.launch_server", "--port", str(port)]
    print("$ python -m radixrt.launch_server --port", port, flush=True)
    t0 = time.perf_counter()
    server = subprocess.Popen(cmd)
    try:
        _wait_healthy(url, server)
        print(f"server ready in {time.perf_counter() - t0:.1f} s\n", flush=True)
        _run_requests(url)
        _run_programs(url)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        print("server stopped")


def _run_requests(url: str) -> None:
    t1 = time.perf_counter()
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:  # concurrent: batched by the scheduler
        outs = list(pool.map(lambda q: _chat(url, q), QUESTIONS))
    elapsed = time.perf_counter() - t1
    for q, out in zip(QUESTIONS, outs, strict=True):
        print(f"Q: {q}\nA: {out['choices'][0]['message']['content'].strip()}\n")
    tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    print(
        f"{len(outs)} concurrent requests: {tokens} tokens in {elapsed:.2f} s "
        f"= {tokens / elapsed:.1f} tokens/s\n"
    )
    again = _chat(url, QUESTIONS[0])
    usage = again["usage"]
    print(f"Asked again: {QUESTIONS[0]}\nA: {again['choices'][0]['message']['content'].strip()}")
    print(
        f"   prompt_tokens={usage['prompt_tokens']}, cached_tokens="
        f"{usage['prompt_tokens_details']['cached_tokens']} (served from the radix cache)\n"
    )
    info = _request(url + "/get_server_info")
    print(
        f"server cache: hit rate {info['cache_hit_rate']:.0%} "
        f"({info['cached_tokens']}/{info['prompt_tokens']} prompt tokens); KV pool "
        f"{info['max_total_tokens']} tokens = {info['free_tokens']} free + "
        f"{info['evictable_tokens']} cached (evictable) + {info['protected_tokens']} in use\n"
    )


def _run_programs(url: str) -> None:
    """Run two frontend-language programs from examples/ against the same server."""
    examples = Path(__file__).resolve().parent
    for name in ("few_shot.py", "select_classifier.py"):
        if not (examples / name).exists():
            print(f"(examples/{name} not found: skipped)")
            continue
        print(f"$ python examples/{name} --url {url}", flush=True)
        subprocess.run([sys.executable, str(examples / name), "--url", url], check=True)
        print()


def _chat(url: str, question: str) -> dict[str, Any]:
    body = {
        "model": "default",
        "temperature": 0,
        "max_tokens": 48,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
    }
    return _request(url + "/v1/chat/completions", body)


def _request(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def _wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with status {server.returncode}")
        try:
            _request(url + "/health")
            return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise SystemExit(f"the server did not become healthy in {START_TIMEOUT_S:.0f} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
