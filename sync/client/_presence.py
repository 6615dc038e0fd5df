"""An agent's presence in its room: a standard y-protocols awareness state, kept current.

Every remote agent announces itself through the awareness message every Yjs peer
understands (stock ``y-websocket`` clients see it too), with this JSON state::

    {"agent": "planner", "status": "idle" | "editing" | "merging" | "offline-queued",
     "base": "<token text of the branch's fork base>", "paths": [["ticket", "owner"], ...],
     "last_merge": "ok" | "conflict" | "error" | "pending" | null, "queued": 0}

``paths`` are the paths of the agent's latest merges (the newest last, at most
:data:`MAX_PATHS`). The state is sent on each connection, again whenever it changes, and
every :data:`RENEW` seconds (stock peers drop a state not renewed within 30 s); the hub
retires it (state ``null``) when the connection closes. Pure logic apart from
:meth:`Presence.run`, the task that sends it.

:class:`Peers` is the other side: the states of the room's other clients (stock Yjs
clients and other agents), kept from the awareness messages the hub sends by the
y-protocols clock rules (:class:`~sync.wire.awareness.AwarenessStates`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from crdt_state import MergeResult, VersionVector
from sync.wire.awareness import AwarenessStates, decode_entries, decoded_state
from sync.wire.errors import ProtocolError
from sync.wire.lib0 import encode_var_string, encode_var_uint
from sync.wire.protocol import encode_awareness

__all__ = ["MAX_PATHS", "RENEW", "Peers", "Presence"]

MAX_PATHS: Final = 16
RENEW: Final = 15.0
"""Seconds after which an unchanged state is sent again (with the next clock): a y-protocols
peer drops a remote state it has not heard of for 30 s, as stock clients renew theirs."""
_RESEND: Final = 0.5
"""Seconds between checks for a new connection when nothing changes."""


class Presence:
    """The awareness state of one agent (client id ``client``) and its clock."""

    def __init__(self, client: int, agent: str) -> None:
        self.client = client
        self.clock = 0
        self.state: dict[str, Any] = {
            "agent": agent,
            "status": "idle",
            "base": None,
            "paths": [],
            "last_merge": None,
            "queued": 0,
        }
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- what the agent does ----------------------------------------------------------
    def forked(self, base: VersionVector) -> None:
        """A branch was opened at ``base``."""
        self._set(status="editing", base=base.to_text())

    def merging(self, paths: Iterable[tuple[Any, ...]], *, online: bool, queued: int) -> None:
        """A merge of ``paths`` was sent (``online``) or queued for later."""
        touched = [p for p in self.state["paths"] if tuple(p) not in set(map(tuple, paths))]
        touched += [list(p) for p in paths]
        self._set(
            status="merging" if online else "offline-queued",
            paths=touched[-MAX_PATHS:],
            queued=queued,
        )

    def merged(self, outcome: str, *, queued: int) -> None:
        """A merge ended (``outcome``: ok, conflict, error or pending)."""
        status = "offline-queued" if queued else "idle"
        self._set(status=status, last_merge=outcome, queued=queued)

    def _set(self, **fields: Any) -> None:
        if all(self.state.get(k) == v for k, v in fields.items()):
            return
        self.state.update(fields)
        self._changed.set()

    async def watch(self, result: Awaitable[MergeResult], queued: Callable[[], int]) -> MergeResult:
        """Await a merge's ``result``, then record how it ended; returns (or raises) it."""
        try:
            outcome = await result
        except BaseException:
            self.merged("error", queued=queued())
            raise
        status = "pending" if outcome.pending else "conflict" if outcome.conflicts else "ok"
        self.merged(status, queued=queued())
        return outcome

    def start(self, connection: Callable[[], ClientConnection | None]) -> None:
        """Start sending (see :meth:`run`) on the running event loop."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(connection))

    async def stop(self) -> None:
        """Stop sending presence and wait for the sender task to end.

        The hub retires this client's presence when the connection closes.
        """
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the wire ------------------------------------------------------------------------
    def frame(self) -> bytes:
        """The awareness message announcing the current state (with the next clock)."""
        self.clock += 1
        text = json.dumps(self.state, separators=(",", ":"))
        payload = (
            encode_var_uint(1)
            + encode_var_uint(self.client)
            + encode_var_uint(self.clock)
            + encode_var_string(text)
        )
        return encode_awareness(payload)

    async def run(self, connection: Callable[[], ClientConnection | None]) -> None:
        """Send the state on each new connection, on each change, and every :data:`RENEW` s.

        Args:
            connection: the agent's current connection (``None`` while offline).
        """
        loop = asyncio.get_running_loop()
        sent_on: ClientConnection | None = None
        sent_at = 0.0
        while True:
            if not self._changed.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_RESEND):
                        await self._changed.wait()
            ws = connection()
            if ws is None:  # offline: look again later (never spin on a pending change)
                await asyncio.sleep(_RESEND)
                continue
            renew = loop.time() - sent_at >= RENEW
            if ws is sent_on and not self._changed.is_set() and not renew:
                continue
            self._changed.clear()
            try:
                await ws.send(self.frame())
                sent_on, sent_at = ws, loop.time()
            except ConnectionClosed:
                sent_on = None


class Peers:
    """The awareness states of the room's other clients (the agent's own, ``own``, left out).

    :attr:`view` maps each client id to its decoded JSON state (its text when it is not
    JSON); a client that left is not in it. The view is replaced on each change, never
    changed in place, so a reader on another thread always sees one whole snapshot.
    """

    def __init__(self, own: int) -> None:
        self.own = own
        self._states = AwarenessStates()
        self.view: Mapping[int, Any] = MappingProxyType({})

    def receive(self, payload: bytes) -> bool:
        """Take an awareness update from the hub; True when it changed the view.

        A malformed update is ignored (presence is advisory: never a reason to drop the
        connection).
        """
        try:
            entries = decode_entries(payload)
        except ProtocolError:
            return False
        changed = self._states.apply(e for e in entries if e.client != self.own)
        if not changed:
            return False
        view = dict(self.view)
        for entry in changed:
            if entry.removed:
                view.pop(entry.client, None)
            else:
                view[entry.client] = decoded_state(entry.state)
        self.view = MappingProxyType(view)
        return True

    def clear(self) -> None:
        """Forget every peer (offline; the hub's greeting on the next connection tells them)."""
        self._states.clear()
        self.view = MappingProxyType({})
