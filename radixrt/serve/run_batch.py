"""`radixrt run-batch -i requests.jsonl -o results.jsonl [serve flags]`: a file of OpenAI batch
requests answered offline, as vLLM's `run_batch` does: a local server is started with the
given flags (its port free, bound to 127.0.0.1, a random key of its own), each endpoint's
lines become one batch of the Batch API (so every line runs through the same route a client
would call, with the prefix cache shared across the file), and the results are written in
input order, one line each: {"id", "custom_id", "response": {"status_code", "request_id",
"body"}, "error"}. Lines may name /v1/chat/completions, /v1/completions or /v1/responses.

Exit status: 0 when every batch ran (lines that failed have their error in the output),
1 when the input was refused (its errors printed, nothing written), 2 for a usage error."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

_OWN_FLAGS = ("--host", "--port", "--api-key", "--api-key-file", "--service-key-file")
_DONE = ("completed", "failed", "expired", "cancelled")
START_TIMEOUT_S = 900.0


class _Server:
    """The local server this run starts and stops."""

    def __init__(self, flags: list[str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.key = secrets.token_urlsafe(24)
        cmd = [sys.executable, "-m", "radixrt.launch_server", *flags, "--host", "127.0.0.1",
               "--port", str(self.port)]  # fmt: skip
        env = {**os.environ, "RADIXRT_API_KEY": self.key}  # (not on the command line)
        self.proc = subprocess.Popen(cmd, env=env, start_new_session=True)

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json") -> bytes:  # fmt: skip
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": content_type},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=600) as r:
                return bytes(r.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise RuntimeError(f"{method} {path}: {e.code} {detail}") from None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {self.proc.returncode}")
            try:
                self.call("GET", "/health")
                return
            except (OSError, RuntimeError):
                time.sleep(0.2)
        raise RuntimeError(f"the server was not ready after {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _upload(server: _Server, lines: list[bytes]) -> str:
    boundary = "radixrt" + secrets.token_hex(8)
    body = b"".join([
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="input.jsonl"\r\n'
        "Content-Type: application/jsonl\r\n\r\n".encode(),
        b"\n".join(lines), f"\r\n--{boundary}--\r\n".encode(),
    ])  # fmt: skip
    answer = server.call("POST", "/v1/files", body, f"multipart/form-data; boundary={boundary}")
    return str(json.loads(answer)["id"])


def _by_endpoint(data: bytes) -> dict[str, list[tuple[int, bytes]]]:
    """Each endpoint's (line number, line); ValueError naming a line that names none."""
    groups: dict[str, list[tuple[int, bytes]]] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            url = json.loads(raw).get("url")
        except (ValueError, AttributeError):
            raise ValueError(f"line {number}: not a JSON object") from None
        if not isinstance(url, str):
            raise ValueError(f"line {number}: no url")
        groups.setdefault(url, []).append((number, raw))
    if not groups:
        raise ValueError("the input file has no requests")
    return groups


def run(input_path: str, output_path: str, flags: list[str]) -> int:
    with open(input_path, "rb") as f:
        groups = _by_endpoint(f.read())
    server = _Server(flags)
    try:
        server.wait_ready()
        batches = {}
        for url, lines in groups.items():
            file_id = _upload(server, [raw for _, raw in lines])
            made = json.loads(
                server.call(
                    "POST",
                    "/v1/batches",
                    json.dumps(
                        {"input_file_id": file_id, "endpoint": url, "completion_window": "24h"}
                    ).encode(),
                )
            )
            batches[url] = made  # fmt: skip
        total, shown = sum(len(x) for x in groups.values()), -1
        while not all(b["status"] in _DONE for b in batches.values()):
            time.sleep(0.5)
            for url, b in batches.items():
                batches[url] = json.loads(server.call("GET", f"/v1/batches/{b['id']}"))
            done = sum(b["request_counts"]["completed"] + b["request_counts"]["failed"]
                       for b in batches.values())  # fmt: skip
            if done != shown:
                print(f"run-batch: {done}/{total} requests done", file=sys.stderr)
                shown = done
        failed = [b for b in batches.values() if b["status"] == "failed"]
        for b in failed:
            for e in b["errors"]["data"]:
                print(f"run-batch: {b['endpoint']} line {e['line']}: {e['code']}: {e['message']}",
                      file=sys.stderr)  # fmt: skip
        if failed:
            return 1
        results: dict[tuple[str, str], bytes] = {}
        for url, b in batches.items():
            for key in ("output_file_id", "error_file_id"):
                if b.get(key):
                    for line in server.call("GET", f"/v1/files/{b[key]}/content").splitlines():
                        results[(url, json.loads(line)["custom_id"])] = line
    finally:
        server.stop()
    ordered = sorted((n, url, json.loads(raw)["custom_id"])
                     for url, lines in groups.items() for n, raw in lines)  # fmt: skip
    with open(output_path, "wb") as out:
        for _, url, custom_id in ordered:
            out.write(results[(url, custom_id)] + b"\n")
    print(f"run-batch: wrote {len(ordered)} results to {output_path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="radixrt run-batch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any other flag is a `radixrt serve` flag (radixrt serve --help).",
    )
    parser.add_argument("-i", "--input-file", required=True, help="JSONL of batch requests")
    parser.add_argument("-o", "--output-file", required=True, help="JSONL results, written")
    args, flags = parser.parse_known_args(argv)
    names = {f.split("=")[0] for f in flags if f.startswith("--")}
    owned = sorted(names & set(_OWN_FLAGS))
    if owned:
        parser.error(f"{owned[0]}: run-batch starts its own local server")
    if args.input_file.startswith(("http://", "https://")):
        parser.error("--input-file: a local file (nothing is downloaded)")
    from radixrt.serve.http.args import parse_args

    served = parse_args(flags)  # a bad serve flag: a usage error now, not from the server's
    if "--batch-in-flight" not in names:  # offline: every slot
        flags = [*flags, "--batch-in-flight", str(served.scheduler.max_running_requests)]
    if "--max-request-bytes" not in names:  # each endpoint's lines are one upload
        size = os.path.getsize(args.input_file) if os.path.exists(args.input_file) else 0
        bound = max(served.server.max_request_bytes, size + 2**20)
        flags = [*flags, "--max-request-bytes", str(bound), "--max-stored-file-bytes",
                 str(max(served.server.max_stored_file_bytes, 4 * bound))]  # fmt: skip
    try:
        return run(args.input_file, args.output_file, flags)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"run-batch: {e}", file=sys.stderr)
        return 1
