"""BrowserConfig: which web pages may reach a radixrt front end (the server, the router, the
Ray ingress; radixrt/serve/web/browser.py enforces it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
_ORIGIN = re.compile(r"https?://[a-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9a-f:.]+\](:[0-9]{1,5})?")


@dataclass(frozen=True)
class BrowserConfig:
    """Names and pages a front end answers besides its own (see docs/reliability.md,
    "Browsers"). A mixin of ServerConfig and RouterServerConfig: one flag each, everywhere."""

    # Comma-separated host names accepted in the Host header besides localhost, *.localhost
    # and IP addresses (a DNS-rebinding page sends its own name); `*.example.com` covers
    # subdomains, `*` any name.
    allowed_hosts: str | None = None
    # Comma-separated origins (`https://app.example.com:8443`) whose pages may call the API
    # (CORS); `*` any. A request with another Origin than the server's own gets 403.
    allowed_origins: str | None = None

    def __post_init__(self) -> None:
        for host in self.host_list:
            if host != "*" and not _HOST.fullmatch(host):
                raise ValueError(f"allowed_hosts: {host!r} is not a host name")
        for origin in self.origin_list:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"allowed_origins: {origin!r} is not an origin (scheme://host[:port])"
                )

    @property
    def host_list(self) -> tuple[str, ...]:
        return _items(self.allowed_hosts, lambda h: h.lower().rstrip("."))

    @property
    def origin_list(self) -> tuple[str, ...]:
        return _items(self.allowed_origins, lambda o: o.lower().rstrip("/"))


def _items(value: str | None, norm: Callable[[str], str]) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(norm(x.strip()) for x in value.split(",") if x.strip())
