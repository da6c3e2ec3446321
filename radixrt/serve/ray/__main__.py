"""`python -m radixrt.serve.ray serve --replicas N [--address ADDR] [--host H] [--port P]
[--router-policy P] [--cache-threshold X ...] [--allowed-hosts H,...] [--allowed-origins O,...]
-- [radixrt serve flags]`

Starts a local Ray cluster (or joins `--address`, e.g. `auto` or `ray://head:10001`) and runs
the application of radixrt/serve/ray/app.py on Ray Serve's HTTP proxy at `--host`:`--port`
(127.0.0.1:8000 by default). Everything after `--` goes to each replica's radixrt server.
Runs until interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from radixrt.core.config import BrowserConfig, RouterConfig, ServerConfig


def make_parser() -> argparse.ArgumentParser:
    """The flags; RouterConfig's and BrowserConfig's come from their fields and defaults."""
    p = argparse.ArgumentParser(
        prog="python -m radixrt.serve.ray", description=__doc__.split("\n")[0]
    )
    p.add_argument("command", choices=["serve"])
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--address", default=None, help="a Ray cluster to join; None: start one")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--health-check-period-s", type=float, default=5.0)
    p.add_argument(
        "--threads-per-replica",
        type=int,
        default=None,
        help="torch threads of each server; default: cores / replicas when this starts the "
        "cluster, the server's own default when joining one",
    )
    p.add_argument("--max-request-bytes", type=int, default=ServerConfig.max_request_bytes,
                   help="request bodies larger than this get 413 at the ingress")  # fmt: skip
    for f in dataclasses.fields(RouterConfig):
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=f.default,
                       type=type(f.default))  # fmt: skip
    for f in dataclasses.fields(BrowserConfig):  # str | None, comma-separated
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=f.default)
    return p


def unauthenticated_cluster(address: str | None) -> str | None:
    """Why the local Ray cluster `ray.init()` would start is unsafe, or None when it would be
    safe (or none is started: joining `--address` runs on a cluster the operator set up).

    Ray's GCS and raylets listen on every interface whatever address they advertise, so the
    only guard of a cluster started here is Ray's token authentication, on by default for a
    new local cluster since the release whose `enable_token_auth_by_default` exists."""
    if address is not None:
        return None
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        return (f"RAY_AUTH_MODE={mode}: a local Ray cluster listens on every interface and "
                "runs any code it is sent; unset RAY_AUTH_MODE (or set it to token), or "
                "start a cluster yourself and pass --address")  # fmt: skip
    try:
        from ray._private.authentication import authentication_token_setup as auth
    except ImportError:
        auth = None
    if auth is None or not hasattr(auth, "enable_token_auth_by_default"):
        return ("this Ray version starts a local cluster without token authentication, "
                "listening on every interface; install a Ray that has it (2.60 or later), or "
                "start a cluster yourself and pass --address")  # fmt: skip
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    server_flags: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, server_flags = argv[:cut], argv[cut + 1 :]
    p = make_parser()
    args = p.parse_args(argv)
    if args.replicas < 1:
        p.error("--replicas must be >= 1")
    if args.max_request_bytes < 1:
        p.error("--max-request-bytes must be >= 1")
    router = {f.name: getattr(args, f.name) for f in dataclasses.fields(RouterConfig)}
    try:
        RouterConfig(**router)  # before anything starts
        browser = BrowserConfig(
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(BrowserConfig)}
        )
    except ValueError as e:
        p.error(str(e))
    unsafe = unauthenticated_cluster(args.address)
    if unsafe is not None:
        p.error(unsafe)
    import ray
    from ray import serve

    from radixrt.serve.ray.app import build_app

    ray.init(address=args.address)
    serve.start(http_options={"host": args.host, "port": args.port})
    threads = args.threads_per_replica
    if threads is None and args.address is None:
        threads = max(1, (os.cpu_count() or 1) // args.replicas)
    app = build_app(
        server_flags,
        args.replicas,
        router,
        args.health_check_period_s,
        threads,
        browser,
        args.max_request_bytes,
    )
    serve.run(app, name="radixrt", route_prefix="/")
    print(f"radixrt on Ray Serve: http://{args.host}:{args.port} ({args.replicas} replicas)",
          flush=True)  # fmt: skip
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
