"""`python -m benchmarks suite` (`make bench`): every benchmark against every peer,
one run.

Each system (radixrt, radixrt with the cache off, llama.cpp, transformers) is started in turn
as a server and gets the same seeded workloads: the four serving datasets, a shared-prefix
sweep over the system-prompt length, the program workloads and the long-context TTFT study;
then radixrt is restarted at other page sizes for the granularity study. Results go to a JSON
lines file and the generated part of docs/benchmarks.md, with PNG plots beside it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.load import loadgen as serving
from benchmarks.load import studies
from benchmarks.load.datasets import DATASETS
from benchmarks.peers import systems as peers

SHARING = ("shared-prefix", "multi-turn", "agent")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks suite", description=__doc__)
    p.add_argument("--systems", nargs="*", default=list(peers.SYSTEMS), choices=list(peers.SYSTEMS))
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that it all runs")
    p.add_argument("--model-path", default=None, help="default: the bundled SmolLM2")
    p.add_argument("--gguf", default=None, help="llama.cpp's model; default: the bundled GGUF")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    p.add_argument("--out-dir", default="docs/bench", help="results.jsonl, plots, server logs")
    p.add_argument("--doc", default="docs/benchmarks.md", help="markdown to update; '' = none")
    p.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["serving", "sweep", "programs", "long-context", "granularity"],
    )
    return p


def run_suite(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every study for every system; returns all result rows (also in results.jsonl)."""
    sizes = studies.QUICK if args.quick else studies.Sizes()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    words = serving.load_words(args.model_path, 0).words
    gguf = Path(args.gguf) if args.gguf else _default_gguf()
    systems = [peers.SYSTEMS[n] for n in args.systems]
    if peers.LLAMA_CPP in systems and not peers.llama_cpp_available():
        print("llama.cpp skipped: llama-cpp-python is not installed (make bench-peers)")
        systems.remove(peers.LLAMA_CPP)
    rows: list[dict[str, Any]] = []
    results = out / "results.jsonl"
    results.write_text("")

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        with results.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")

    for system in systems:
        _run_system(system, args, sizes, words, gguf, out, keep)
    if "granularity" not in args.skip and peers.RADIXRT in systems:
        for ps in sizes.page_sizes:
            system = peers.page_size_system(ps)
            _run_system(
                system, args, sizes, words, gguf, out, keep, only=("serving",), datasets=SHARING
            )
    return rows


def _run_system(
    system: peers.System,
    args: argparse.Namespace,
    sizes: studies.Sizes,
    words: list[str],
    gguf: Path,
    out: Path,
    keep: Any,
    only: tuple[str, ...] | None = None,
    datasets: tuple[str, ...] = DATASETS,
) -> None:
    chosen = [
        s
        for s in ("serving", "sweep", "programs", "long-context")
        if s not in args.skip and (only is None or s in only)
    ]
    cmd = peers.launch_command(system, peers.free_port(), args.model_path, gguf, args.threads)
    log = out / f"server-{system.name.replace(' ', '-').replace('.', '')}.log"
    print(f"=== {system.name}: {shlex.join(cmd)}", flush=True)
    extra = peers.eos_logit_bias(args.model_path) if system.kind == "llama.cpp" else {}
    if system.kind == "transformers":
        extra = {"ignore_eos": True}
    with peers.ManagedServer(cmd, log) as url:
        base = {
            "study": "serving",
            "system": system.name,
            "kind": system.kind,
            "page_size": _page_size(system),
        }
        for study in chosen:
            t0 = time.perf_counter()
            for row in studies.STUDIES[study](system, url, sizes, words, extra, datasets):
                keep({**base, "study": study, **row})
            print(f"--- {system.name} {study}: {time.perf_counter() - t0:.1f} s", flush=True)


def _page_size(system: peers.System) -> int | None:
    if not system.is_radixrt:
        return None
    return int(system.flags[1]) if system.flags[:1] == ("--page-size",) else 1


def _default_gguf() -> Path:
    from radixrt.model.families.loader import default_gguf_path

    return default_gguf_path()


def main(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    t0 = time.time()
    rows = run_suite(args)
    elapsed = time.time() - t0
    from benchmarks.load import plots as bench_plots
    from benchmarks.load import report

    args_line = shlex.join(sys.argv[1:] if argv is None else argv)
    command = "python -m benchmarks suite " + args_line
    plots = bench_plots.make_plots(rows, Path(args.out_dir))
    text = report.render(
        rows,
        command=command.strip(),
        elapsed_s=elapsed,
        plots=plots,
        doc_dir=Path(args.doc).parent if args.doc else Path(args.out_dir),
    )
    if args.doc:
        report.write_section(Path(args.doc), text)
        print(f"wrote {args.doc} and {args.out_dir}/ in {elapsed / 60:.1f} min")
    else:
        print(text)


if __name__ == "__main__":
    main()
