"""Command-line flags for `radixrt router`: the worker URLs plus one flag per field of
RouterConfig and RouterServerConfig, defaults taken from the dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, NamedTuple

from radixrt.core.config import LOG_LEVELS, RouterConfig, RouterServerConfig
from radixrt.serve.placement.policy import ROUTING_POLICIES

ROUTER_CONFIGS = (RouterConfig, RouterServerConfig)
_CHOICES: dict[str, tuple[str, ...]] = {
    "router_policy": tuple(ROUTING_POLICIES),
    "log_level": LOG_LEVELS,
}
_TYPES = {"int": int, "float": float, "str": str}


class RouterArgs(NamedTuple):
    worker_urls: list[str]
    router: RouterConfig
    server: RouterServerConfig


def make_parser(prog: str = "radixrt router") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Route requests over several radixrt servers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--worker-urls",
        nargs="+",
        required=True,
        metavar="URL",
        help="base URLs of the worker servers, e.g. http://10.0.0.2:30000",
    )
    for cls in ROUTER_CONFIGS:
        group = parser.add_argument_group(cls.__name__)
        for f in dataclasses.fields(cls):
            kwargs: dict[str, Any] = {"dest": f.name, "default": f.default}
            kind = str(f.type).replace(" ", "").removesuffix("|None")
            if kind == "bool":
                kwargs["action"] = "store_true"
            else:
                kwargs["type"] = _TYPES[kind]
            if f.name in _CHOICES:
                kwargs["choices"] = _CHOICES[f.name]
            group.add_argument(f"--{f.name.replace('_', '-')}", **kwargs)
    return parser


def parse_args(argv: list[str] | None = None) -> RouterArgs:
    """Parse flags; exits with a usage error on a bad value."""
    parser = make_parser()
    ns = vars(parser.parse_args(argv))
    try:
        router, server = (
            cls(**{f.name: ns[f.name] for f in dataclasses.fields(cls)}) for cls in ROUTER_CONFIGS
        )
    except ValueError as e:
        parser.error(str(e))
    if server.kv_events and router.router_policy != "cache_aware":
        parser.error("--kv-events feeds the cache_aware policy: not with --router-policy "
                     f"{router.router_policy}")  # fmt: skip
    urls = ns["worker_urls"]
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        parser.error(f"worker URLs must start with http:// or https://, got {bad[0]!r}")
    return RouterArgs(urls, router, server)  # type: ignore[arg-type]
