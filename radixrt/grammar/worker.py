"""A grammar-check worker process: `python -m radixrt.grammar.worker '<WorkerArgs JSON>'` compiles
the specs it reads from stdin and says whether each compiled, so a compile that runs too long is
stopped by killing the process. Frames both ways are a 4-byte big-endian length, then msgpack."""

from __future__ import annotations

import logging
import os
import queue
import signal
import struct
import sys
import threading
from pathlib import Path
from typing import BinaryIO

import msgspec

from radixrt.grammar import create_grammar_backend
from radixrt.grammar.base import BaseGrammarBackend, GrammarError, GrammarSpec

HEADER = struct.Struct(">I")  # the byte length of the msgpack body that follows
MAX_FRAME_BYTES = 64 * 2**20  # a larger length is a broken stream, not a message
MAX_ERROR_CHARS = 2000  # a backend's message is cut here (it may quote the spec)
# A worker yields the CPU to the scheduler and HTTP processes: its start (loading the
# tokenizer, about 3 CPU-seconds) otherwise took a tenth of a 2-core machine from the first
# requests served. A check waits a little longer on a busy machine instead.
NICE = 10

logger = logging.getLogger("radixrt.grammar.worker")


class WorkerArgs(msgspec.Struct, frozen=True):
    """The worker's only argument, as JSON: what it needs to build the backend."""

    model_path: str  # a folder with the tokenizer files
    backend: str  # a GRAMMAR_BACKENDS name
    vocab_size: int
    eos_token_ids: list[int]
    log_level: str = "info"  # a logging level name
    branch_cache_bytes: int | None = None  # SchedulerConfig.grammar_branch_cache_mb; None: default


class CheckReqMsg(msgspec.Struct, tag=True):
    """Parent -> worker: compile this spec (kind is one of SPEC_KINDS)."""

    rid: int
    kind: str
    text: str


class WorkerReadyMsg(msgspec.Struct, tag=True):
    """Worker -> parent, once, when the backend is built; nothing is read before it."""

    pid: int


class CheckOutMsg(msgspec.Struct, tag=True):
    """Worker -> parent, one per CheckReqMsg in order: None if the spec compiles, else why not."""

    rid: int
    error: str | None


FromWorkerMsg = WorkerReadyMsg | CheckOutMsg


def encode_frame(encoder: msgspec.msgpack.Encoder, msg: msgspec.Struct) -> bytes:
    """One message as a length-prefixed frame."""
    body = encoder.encode(msg)
    return HEADER.pack(len(body)) + body


def main(argv: list[str]) -> None:
    """Build the backend, then answer requests until stdin closes (the parent is gone)."""
    try:
        os.nice(NICE)
    except OSError:  # not allowed here: run at the parent's priority
        pass
    args = msgspec.json.decode(argv[1], type=WorkerArgs)
    level = logging.getLevelName(args.log_level.upper())  # an int for a known name
    logging.basicConfig(
        level=level if isinstance(level, int) else logging.INFO,
        format="%(asctime)s grammar worker %(process)d: %(message)s",
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us: stdin EOF or a kill
    # Replies own fd 1; stray prints from libraries go to stderr instead of into the stream.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests: queue.Queue[CheckReqMsg] = queue.Queue()
    # Started before the (seconds-long) backend build, so a parent that dies early is noticed.
    threading.Thread(target=_read_requests, args=(sys.stdin.buffer, requests), daemon=True).start()

    from radixrt.model.families.loader import load_tokenizer  # imports torch: only in the worker

    tokenizer = load_tokenizer(Path(args.model_path))
    backend = create_grammar_backend(
        args.backend, tokenizer, args.vocab_size, args.eos_token_ids, args.branch_cache_bytes
    )
    encoder = msgspec.msgpack.Encoder()
    _send(out, encode_frame(encoder, WorkerReadyMsg(os.getpid())))
    while True:
        req = requests.get()
        _send(out, encode_frame(encoder, CheckOutMsg(req.rid, _check(backend, req))))


def _send(out: BinaryIO, frame: bytes) -> None:
    out.write(frame)
    out.flush()


def _check(backend: BaseGrammarBackend, req: CheckReqMsg) -> str | None:
    spec = GrammarSpec(req.kind, req.text)
    try:
        backend.check(spec)
    except GrammarError as e:
        return str(e)[:MAX_ERROR_CHARS]
    except Exception as e:  # a backend bug is this spec's failure, not the worker's
        return f"could not compile the {spec.kind}: {e}"[:MAX_ERROR_CHARS]
    return None


def _read_requests(stream: BinaryIO, requests: queue.Queue[CheckReqMsg]) -> None:
    """Reader thread: queue each request; exit the process when stdin closes or is garbled."""
    decoder = msgspec.msgpack.Decoder(CheckReqMsg)
    while True:
        header = stream.read(HEADER.size)
        if len(header) < HEADER.size:
            os._exit(0)  # EOF: the parent closed our stdin or died
        (size,) = HEADER.unpack(header)
        body = stream.read(size) if size <= MAX_FRAME_BYTES else b""
        try:
            requests.put(decoder.decode(body))
        except msgspec.DecodeError as e:
            logger.error("bad request frame (%d bytes): %s", size, e)
            os._exit(1)


if __name__ == "__main__":
    main(sys.argv)
