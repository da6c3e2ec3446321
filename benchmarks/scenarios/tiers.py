"""Lower KV tiers: time to first token from each tier, and a working set 5x the pool.

    python -m benchmarks tiers [--model-path P] [--lengths 2048 8192] [--quick]
                              [--json OUT]

TTFT (one output token: the whole request) of a document of each --lengths tokens followed by
a new 16-token question, served
  - recomputed: no cache (the engine flushed before each query);
  - device:     from the radix tree;
  - host:       from the host tier, after a flood of unique tokens evicted the document;
  - disk:       from --cache-dir in a new engine (a restart) and after each flush (the files
                stay); `disk, cold` drops the files from the OS page cache first
                (posix_fadvise DONTNEED), so the blocks are read from the device.
Then the working set: --prefixes documents of --prefix-tokens each (5x the pool), each asked
--visits times in a shuffled order, all requests submitted together; hit rate, throughput and
whether the greedy tokens equal the run without tiers. Last, the time to index a folder of
--index-gb of block files at start (sparse files of the real sizes: the index reads names and
sizes only). Every figure comes from this process on this machine, in one run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from radixrt.model.cpu.build import cpu_flags, cpu_model

QUESTION_TOKENS = 16
QUICK = {"lengths": [128, 256], "prefix_tokens": 128, "prefixes": 10, "visits": 2, "pool": 256,
         "repeats": 2, "index_gb": 0.05}  # fmt: skip


def _tokens(tokenizer: Any, n: int, seed: int) -> list[int]:
    """`n` token ids of English-like text (sentences drawn from a small vocabulary)."""
    rng = random.Random(seed)
    words = ("the cache model token prefix server request disk memory page block tree "
             "answer question document user agent tool result value time").split()  # fmt: skip
    ids: list[int] = []
    while len(ids) < n:
        sentence = " ".join(rng.choice(words) for _ in range(12)).capitalize() + ". "
        ids += tokenizer.encode(sentence, add_special_tokens=False)
    return ids[:n]


def _ttft(engine: Any, ids: list[int]) -> float:
    t0 = time.perf_counter()
    out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 1, "temperature": 0})
    elapsed = time.perf_counter() - t0
    meta = out["meta_info"]
    if (meta.get("finish_reason") or {}).get("type") not in ("length", "stop"):
        raise RuntimeError(f"a {len(ids)}-token request failed: {meta.get('finish_reason')}")
    engine.last_meta = meta
    return elapsed


def _answer(engine: Any, ids: list[int]) -> dict[str, Any]:
    return engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 8, "temperature": 0})


def _drop_page_cache(folder: Path) -> None:
    for f in folder.rglob("*.kv"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def ttft_rows(model: str | None, length: int, repeats: int, cache_dir: Path) -> list[dict]:
    """One row per tier for a document of `length` tokens."""
    from radixrt.serve.engine import Engine

    rows: list[dict] = []
    pool = length + 2 * QUESTION_TOKENS + 64
    common = {"max_total_tokens": pool, "tier_block_size": 64}

    def row(name: str, times: list[float], meta: dict[str, Any]) -> None:
        rows.append({"length": length, "tier": name, "ttft_s": statistics.median(times),
                     "runs": len(times), "cached_by_tier": meta.get("cached_tokens_by_tier"),
                     "load_s": meta.get("cache_load_time")})  # fmt: skip

    with Engine(model, host_cache_size=3 * pool * 50e3 / 1e9, **common) as eng:
        doc = _tokens(eng.tokenizer, length, seed=length)
        question = [_tokens(eng.tokenizer, QUESTION_TOKENS, seed=1000 + i) for i in range(99)]
        _ttft(eng, question[98])  # warm up
        times = []
        for i in range(repeats):
            eng.flush_cache()
            times.append(_ttft(eng, doc + question[i]))
        row("recomputed", times, eng.last_meta)
        times = [_ttft(eng, doc + question[10 + i]) for i in range(repeats)]
        row("device", times, eng.last_meta)
        times = []
        for i in range(repeats):
            _ttft(eng, _tokens(eng.tokenizer, length, seed=5000 + i))  # evicts the document
            times.append(_ttft(eng, doc + question[20 + i]))
        row("host", times, eng.last_meta)

    with Engine(model, cache_dir=str(cache_dir), **common) as eng:
        _ttft(eng, doc + question[30])  # written through (>= 1024 tokens) or spilled below
        _ttft(eng, _tokens(eng.tokenizer, length, seed=6000))  # evicts it: spilled
    for cold in (False, True):
        with Engine(model, cache_dir=str(cache_dir), **common) as eng:  # a restart
            times = []
            for i in range(repeats):
                if cold:
                    _drop_page_cache(cache_dir)
                times.append(_ttft(eng, doc + question[40 + 10 * cold + i]))
                eng.flush_cache()  # device only: the files stay
            row("disk, cold" if cold else "disk", times, eng.last_meta)
    base = rows[0]["ttft_s"]
    for r in rows:
        r["x_recomputed"] = r["ttft_s"] / base
    return rows


def working_set(model: str | None, pool: int, prefix_tokens: int, prefixes: int, visits: int,
                clients: int, cache_dir: Path) -> list[dict]:  # fmt: skip
    """Hit rate and throughput over prefixes `prefixes * prefix_tokens / pool` times the pool:
    `visits` rounds, each asking every document once in a new order, sent by `clients`
    closed-loop clients (each sends its next request when its last one is answered)."""
    from concurrent.futures import ThreadPoolExecutor

    from radixrt.serve.engine import Engine

    out = []
    tokens: dict[bool, list[list[int]]] = {}
    for tiers in (False, True):
        kw: dict[str, Any] = {"cache_dir": str(cache_dir / "ws")} if tiers else {}
        with Engine(model, max_total_tokens=pool, tier_block_size=64, **kw) as eng:
            docs = [_tokens(eng.tokenizer, prefix_tokens, seed=7000 + i) for i in range(prefixes)]
            rng = random.Random(0)
            order = [i for _ in range(visits) for i in rng.sample(range(prefixes), prefixes)]
            prompts = [docs[d] + _tokens(eng.tokenizer, QUESTION_TOKENS, seed=9000 + j)
                       for j, d in enumerate(order)]  # fmt: skip
            _ttft(eng, prompts[0][:32])  # warm up
            eng.flush_cache()
            t0 = time.perf_counter()
            with ThreadPoolExecutor(clients) as ex:  # map keeps the order, runs `clients` at once
                results = list(ex.map(functools.partial(_answer, eng), prompts))
            elapsed = time.perf_counter() - t0
            prompt = sum(len(p) for p in prompts)
            cached = sum(r["meta_info"]["cached_tokens"] for r in results)
            tokens[tiers] = [r["output_ids"] for r in results]
            out.append({"tiers": tiers, "requests": len(prompts), "clients": clients,
                        "seconds": elapsed, "req_per_s": len(prompts) / elapsed,
                        "hit_rate": cached / prompt,
                        "working_set_x_pool": prefixes * prefix_tokens / pool})  # fmt: skip
    out[1]["x_without"] = out[1]["req_per_s"] / out[0]["req_per_s"]
    out[1]["same_tokens"] = tokens[True] == tokens[False]
    return out


def index_time(model: str | None, gb: float, folder: Path, block: int = 64) -> dict:
    """Seconds for a DiskTier to index `gb` of this model's block files at start: sparse
    files of the real sizes (blocks 0-127 of 8k-token prefixes), in a fresh folder."""
    import torch

    from radixrt.cache.tiers.disk import DiskTier
    from radixrt.cache.tiers.disk_folder import block_file
    from radixrt.cache.tiers.disk_format import BlockSpec, file_size, header_bytes
    from radixrt.model.families.loader import resolve_model_path

    cfg = json.loads((resolve_model_path(model) / "config.json").read_text())
    heads = cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    shape = (cfg["num_hidden_layers"], 2, block, heads, head_dim)
    spec = BlockSpec("00" * 32, block, torch.float32, shape)
    root = folder / spec.fingerprint[:16]
    root.mkdir(parents=True, exist_ok=True, mode=0o700)  # the tier refuses a folder others
    folder.chmod(0o700)  # may write (whatever the umask made)
    rng = random.Random(0)
    files, total = 0, 0
    while total < gb * 1e9:
        index = files % 128
        size = file_size(spec, index, len(header_bytes(spec, None, index)))
        path = block_file(root, rng.randbytes(32))
        path.parent.mkdir(exist_ok=True, mode=0o700)
        with open(path, "wb") as f:
            f.truncate(size)
        files, total = files + 1, total + size
    t0 = time.perf_counter()
    tier = DiskTier(folder, spec, int(2 * total))
    seconds = time.perf_counter() - t0
    assert tier.num_blocks == files
    tier.close()
    return {"files": files, "gb": total / 1e9, "seconds": seconds}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-path", default=None)
    p.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[2048, 8000],
        help="document tokens (with the question and one output token, within the "
        "model's context: 8000 for SmolLM2's 8192)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pool", type=int, default=4096, help="KV pool of the working-set run")
    p.add_argument("--prefix-tokens", type=int, default=1024)
    p.add_argument("--prefixes", type=int, default=20)
    p.add_argument("--visits", type=int, default=4)
    p.add_argument("--clients", type=int, default=4, help="closed-loop clients (working set)")
    p.add_argument("--index-gb", type=float, default=10.0)
    p.add_argument("--parts", nargs="+", default=["ttft", "working-set", "index"],
                   choices=["ttft", "working-set", "index"])  # fmt: skip
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():  # flags given explicitly win
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    flags = set(cpu_flags().split())
    results: dict[str, Any] = {
        "cpu": cpu_model(),
        "isa": sorted(flags & {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"}),
        "ttft": [],
    }
    with tempfile.TemporaryDirectory(prefix="radixrt-tiers-") as tmp:
        for length in args.lengths if "ttft" in args.parts else []:
            rows = ttft_rows(args.model_path, length, args.repeats, Path(tmp) / f"kv{length}")
            results["ttft"] += rows
            for r in rows:
                print(f"{length:>6} tokens  {r['tier']:<11} TTFT {r['ttft_s']:7.3f} s  "
                      f"{r['x_recomputed']:.3f}x recomputed  {r['cached_by_tier']}",
                      flush=True)  # fmt: skip
        if "working-set" in args.parts:
            results["working_set"] = working_set(
                args.model_path, args.pool, args.prefix_tokens, args.prefixes, args.visits,
                args.clients, Path(tmp),
            )  # fmt: skip
            for r in results["working_set"]:
                print(f"working set {r['working_set_x_pool']:.1f}x pool, tiers "
                      f"{'on ' if r['tiers'] else 'off'}: {r['req_per_s']:.2f} req/s, hit rate "
                      f"{r['hit_rate']:.2f}", flush=True)  # fmt: skip
            ws = results["working_set"][1]
            print(f"throughput with tiers: {ws['x_without']:.2f}x without; same greedy tokens: "
                  f"{ws['same_tokens']}")  # fmt: skip
        if "index" in args.parts:
            results["index"] = index_time(args.model_path, args.index_gb, Path(tmp) / "index")
            ix = results["index"]
            print(f"index at start: {ix['files']} files, {ix['gb']:.1f} GB in "
                  f"{ix['seconds']:.3f} s")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
