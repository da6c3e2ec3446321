"""`python -m radixrt.launch_server [flags]`: serve a model over HTTP (see `--help`)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from radixrt.serve.http.args import parse_args
    from radixrt.serve.http.launch import run_server

    sys.exit(run_server(parse_args(argv)))


if __name__ == "__main__":
    main()
