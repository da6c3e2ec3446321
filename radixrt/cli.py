"""The `radixrt` console script: `radixrt serve [flags]` (same flags as launch_server), and the
other commands in USAGE."""

from __future__ import annotations

import sys

USAGE = """usage: radixrt <command> [flags]

commands:
  serve    serve a model over HTTP (radixrt serve --help lists the flags)
  router   route requests over several servers (radixrt router --help lists the flags)
  run-batch  answer a JSONL file of OpenAI batch requests offline (radixrt run-batch --help)
  keys     add or list API keys of a --api-key-file (radixrt keys --help)
  kv-size  KV cache bytes of a model, and what fits on a GPU (radixrt kv-size --help)
  cost     a workload's cost under each provider's prompt caching and self-hosted
           (radixrt cost --help)
  bench    run a benchmark of the source checkout by name (radixrt bench lists them)
"""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="", file=sys.stdout if argv else sys.stderr)
        sys.exit(0 if argv else 2)
    command, rest = argv[0], argv[1:]
    if command == "serve":
        from radixrt.launch_server import main as serve

        serve(rest)
    elif command == "router":
        from radixrt.serve.router.__main__ import main as router

        router(rest)
    elif command == "run-batch":
        from radixrt.serve.run_batch import main as run_batch

        sys.exit(run_batch(rest))
    elif command == "keys":
        from radixrt.serve.web.keys_cli import main as keys

        sys.exit(keys(rest))
    elif command == "kv-size":
        from radixrt.economics.kv_size_cli import main as kv_size

        sys.exit(kv_size(rest))
    elif command == "cost":
        from radixrt.economics.cost_cli import main as cost

        sys.exit(cost(rest))
    elif command == "bench":
        from radixrt.bench import main as bench  # imports no benchmark until one runs

        sys.exit(bench(rest))
    else:
        print(f"radixrt: unknown command {command!r}\n\n{USAGE}", end="", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
