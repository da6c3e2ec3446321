"""Small stdlib HTTP client for the backends: JSON requests and server-sent events."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from radixrt_lang.errors import BackendError


class HttpClient:
    """JSON over HTTP to one base URL; every failure becomes a BackendError with the server's
    message. Thread-safe (one connection per request)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def get(self, path: str) -> Any:
        with self._open(path, None) as resp:
            return json.loads(resp.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        with self._open(path, body) as resp:
            return json.loads(resp.read())

    def post_events(self, path: str, body: dict[str, Any]) -> Iterator[Any]:
        """POST and yield each `data:` event's JSON until `data: [DONE]` or the stream ends.

        An event that is an error object (`{"error": {...}}`) raises BackendError."""
        with self._open(path, body) as resp:
            for raw in resp:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if isinstance(event, dict) and "error" in event:
                    raise BackendError(_error_message(event), event["error"].get("code"))
                yield event

    def _open(self, path: str, body: dict[str, Any] | None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            headers=self.headers,
            method="GET" if body is None else "POST",
        )
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = _error_message(json.loads(raw))
            except ValueError:
                message = raw.decode("utf-8", "replace") or e.reason
            raise BackendError(f"{message} (HTTP {e.code} from {path})", e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise BackendError(f"cannot reach {self.base_url}{path}: {reason}") from None


def _error_message(obj: Any) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj))
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(obj)
