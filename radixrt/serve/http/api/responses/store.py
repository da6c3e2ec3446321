"""Stored responses (`store: true`): the answer as retrieved, and the conversation the next
turn continues with previous_response_id, per tenant, bounded in count and bytes.

Ownership: the store lives in the HTTP process (event loop only) and holds each response's
body and conversation; the scheduler holds its pin (`pin_id`: the prompt, with a TTL), made
when the request finished. A response leaves the store when deleted or when its tenant's
bound is passed (the oldest first); its pin is dropped with it. A pin that expired first
leaves the response stored: the next turn then recomputes what the tree no longer holds.
Another tenant's ids are not found.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from radixrt.serve.http.api.responses.prompt import Conversation

logger = logging.getLogger("radixrt")


class ResponseNotFoundError(LookupError):
    """No stored response with that id for this tenant (answered with 404 in OpenAI's shape:
    `param` and `code` name what was not found)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True, slots=True, eq=False)
class StoredResponse:
    id: str
    owner: str
    body: dict[str, Any]  # the response object as answered
    conversation: Conversation
    pin_id: str | None  # its pin in the scheduler, dropped with it

    @property
    def nbytes(self) -> int:
        return len(msgspec.json.encode(self.body)) + self.conversation.nbytes


class ResponseStore:
    """Stored responses by owner (a tenant, "" without tenants), oldest first.
    `tm`: the TokenizerManager or the --dp dispatcher (update_pin)."""

    def __init__(self, tm: Any, max_per_owner: int, max_bytes_per_owner: int) -> None:
        self.tm = tm
        self.max_per_owner = max_per_owner
        self.max_bytes_per_owner = max_bytes_per_owner
        self._owners: dict[str, OrderedDict[str, tuple[StoredResponse, int]]] = {}
        self._bytes: dict[str, int] = {}
        self._unpins: set[asyncio.Task[Any]] = set()  # kept until done

    def add(self, stored: StoredResponse) -> bool:
        """Keep `stored`; past its owner's bounds the oldest go (a response larger than the
        byte bound on its own is not kept: False). Called on the event loop."""
        mine = self._owners.setdefault(stored.owner, OrderedDict())
        size = stored.nbytes
        mine[stored.id] = (stored, size)
        self._bytes[stored.owner] = self._bytes.get(stored.owner, 0) + size
        while mine and (
            len(mine) > self.max_per_owner or self._bytes[stored.owner] > self.max_bytes_per_owner
        ):
            gone = self._forget(stored.owner, next(iter(mine)))
            if gone.pin_id is not None:  # a task: add runs inside a render, which cannot wait
                task = asyncio.get_running_loop().create_task(self._unpin(gone.pin_id))
                self._unpins.add(task)
                task.add_done_callback(self._unpins.discard)
        return stored.id in mine

    def get(self, owner: str, response_id: str, param: str | None = None) -> StoredResponse:
        mine = self._owners.get(owner)
        found = None if mine is None else mine.get(response_id)
        if found is None:
            if param == "previous_response_id":
                raise ResponseNotFoundError(
                    f"Previous response with id '{response_id}' not found.",
                    param,
                    "previous_response_not_found",
                )
            raise ResponseNotFoundError(f"No response found with id '{response_id}'.", param)
        return found[0]

    async def delete(self, owner: str, response_id: str) -> None:
        """Forget a response; its pin is dropped before this returns."""
        self.get(owner, response_id, "response_id")
        gone = self._forget(owner, response_id)
        if gone.pin_id is not None:
            await self._unpin(gone.pin_id)

    def num_stored(self, owner: str) -> int:
        return len(self._owners.get(owner, ()))

    def _forget(self, owner: str, response_id: str) -> StoredResponse:
        stored, size = self._owners[owner].pop(response_id)
        self._bytes[owner] -= size
        if not self._owners[owner]:
            del self._owners[owner], self._bytes[owner]
        return stored

    async def _unpin(self, pin_id: str) -> None:
        try:
            await self.tm.update_pin(pin_id, None)  # False: it expired or a flush dropped it
        except Exception as e:  # the scheduler is gone or wedged: its pins went with it
            logger.warning("could not drop pin %s of a stored response: %s", pin_id, e)
