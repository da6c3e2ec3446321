"""The standalone router in front of separate servers:
`python -m radixrt.serve.router --worker-urls URL [URL ...] [--port P]`."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixrt.serve.router.args import RouterArgs


def main(argv: list[str] | None = None) -> None:
    from radixrt.serve.router.args import parse_args

    args = parse_args(argv)
    logging.basicConfig(
        level=args.server.log_level.upper(), format="%(asctime)s %(levelname)s router: %(message)s"
    )
    sys.exit(asyncio.run(_serve(args)))


async def _serve(args: RouterArgs) -> int:
    import uvicorn

    from radixrt.serve.router.app import create_router_app

    s = args.server
    app = create_router_app(args.worker_urls, args.router, s)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=s.host,
            port=s.port,
            log_config=None,
            access_log=False,
            log_level="debug" if s.log_level == "debug" else "warning",
        )
    )
    logging.getLogger("radixrt.serve.router").info(
        "routing over %d workers (%s) on http://%s:%d",
        len(args.worker_urls),
        args.router.router_policy,
        s.host,
        s.port,
    )
    await server.serve()
    return 0 if server.started else 1  # a start-up refusal (an unsafe worker) was logged


if __name__ == "__main__":
    main()
