"""The router's credential toward its workers, and the check that a worker is safe behind it.

With `--service-key-file` every call to a worker carries the service key: the router's own
(flush, server info, model info, `--kv-events`) as an admin of no tenant, a forwarded request
with the tenant and role of the client the router checked (`x-radixrt-tenant`,
`x-radixrt-role`; the client's own key stays at the router). Without it the router's calls
carry its `--api-key` if any, and forwarded requests the client's own key.

A worker is put in rotation only when it is safe (`vet`): it takes the router's credential;
when the router has keys, it refuses a request without one (else anyone who reaches it skips
the router's keys, and tenants would share its cache); with tenants, it takes the tenant from
the router. A worker that is not, found at start, stops the router with the reason.
"""

from __future__ import annotations

import httpx
from starlette.requests import Request

from radixrt.core.config import RouterServerConfig
from radixrt.serve.router.handles import passed_headers
from radixrt.serve.router.workers import WorkerUnsafeError
from radixrt.serve.web.keys import ROLE_HEADER, TENANT_HEADER, read_service_key
from radixrt.serve.web.middleware import identity_of

_CLIENT_KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
_PROBE_TENANT = "radixrt-router-check"
_TIMEOUT_S = 5.0


class WorkerAuth:
    """The headers the router sends to its workers."""

    def __init__(self, config: RouterServerConfig) -> None:
        self.service = None
        if config.service_key_file is not None:  # KeyFileError (a ValueError) stops the start
            self.service = read_service_key(config.service_key_file)
        key = self.service or config.api_key
        self.own = {"Authorization": f"Bearer {key}"} if key else {}
        self.has_keys = config.api_key is not None or config.api_key_file is not None
        self.has_tenants = config.api_key_file is not None

    def forwarded(self, request: Request) -> dict[str, str]:
        """A client's request as passed on: its content headers, and the service key with
        the identity the router gave it (else the client's own key)."""
        headers = passed_headers(request)
        if self.service is None:
            return headers
        for name in _CLIENT_KEY_HEADERS:
            headers.pop(name, None)
        identity = identity_of(request)
        headers.update(self.own)
        headers[ROLE_HEADER] = identity.role
        if identity.tenant is not None:
            headers[TENANT_HEADER] = identity.tenant
        return headers

    async def vet(self, client: httpx.AsyncClient, url: str) -> None:
        """Raise WorkerUnsafeError when the worker at `url` is unsafe behind this router
        (httpx.HTTPError when it cannot be asked)."""
        r = await client.get(url + "/get_server_info", headers=self.own, timeout=_TIMEOUT_S)
        if r.status_code in (401, 403):
            fix = (
                "the workers' --service-key-file must hold the router's service key"
                if self.service
                else "start the router and every worker with --service-key-file (one shared key)"
            )
            raise WorkerUnsafeError(
                f"worker {url} refuses the router's own calls ({r.status_code}): {fix}"
            )
        if self.has_keys:
            bare = await client.get(url + "/get_server_info", timeout=_TIMEOUT_S)
            if bare.status_code == 200:
                raise WorkerUnsafeError(
                    f"worker {url} answers without a key while the router checks keys: "
                    "anyone who reaches it skips them, and tenants would share its cache; "
                    "start every worker with --service-key-file (the router's service key)"
                )
        if self.has_tenants:
            probe = {**self.own, TENANT_HEADER: _PROBE_TENANT, ROLE_HEADER: "user"}
            r = await client.get(url + "/v1/usage", headers=probe, timeout=_TIMEOUT_S)
            tenant = _json_field(r, "tenant") if r.status_code == 200 else None
            if tenant != _PROBE_TENANT:
                raise WorkerUnsafeError(
                    f"worker {url} does not take the tenant from the router (/v1/usage "
                    f"answered {r.status_code}, tenant {tenant!r}): start it with "
                    "--service-key-file holding the router's service key"
                )


def _json_field(r: httpx.Response, name: str) -> object:
    try:
        body = r.json()
    except ValueError:
        return None
    return body.get(name) if isinstance(body, dict) else None
