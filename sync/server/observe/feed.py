"""One inspector feed: a websocket that streams a room's events to the page as JSON.

The hub hands the connection over after authorising it (read role is enough). The feed
sends, as text frames of one JSON object each (``docs/protocol.md``, *Inspector feed*):

- ``hello`` then ``state`` (the whole content and token), ``history`` and ``conflicts``
  (durable rooms: the newest recorded changes and conflicts);
- ``change`` for every change the room integrates, at once, and a fresh ``state`` at most
  every :data:`STATE_INTERVAL` seconds while changes come in;
- ``merge`` for every merge the hub judged (status, agent, conflicts, error);
- ``agents`` (from awareness) and ``connections`` when they change, ``stats`` every second;
- ``reply`` to the page's queries ``{"id", "op": "history"|"at"|"blame"|"conflicts"|"state"}``.

Reads of a durable room's history run on a worker thread; a feed that cannot keep up
(:data:`MAX_QUEUE` events waiting) is closed with 1013, and never slows the room. A feed
lives no longer than its token: it is closed with 1008 (``access token expired``) within
a tick of the token's ``exp``, and a query that comes after it is not answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from crdt_state import CrdtStateError, StateUpdate, VersionVector
from sync.server._expiry import TOKEN_EXPIRED_REASON, token_expired
from sync.server._room import Room
from sync.server.auth import Grant
from sync.server.observe.events import (
    blame_event,
    change_event,
    conflict_event,
    history_event,
    jsonable,
    state_value,
)
from sync.wire.errors import CloseCode

__all__ = ["MAX_QUEUE", "ROOM_UNLOADED", "STATE_INTERVAL", "Feed"]

log = logging.getLogger("crdt_state.inspect")

STATE_INTERVAL = 0.05
"""Seconds between two ``state`` events while the room changes."""
MAX_QUEUE = 2_000
"""Events waiting for a slow page before its feed is closed."""
ROOM_UNLOADED = 1012
"""Close code of a feed whose room the hub unloaded (the page reconnects)."""
_TICK = 0.25
_HISTORY_LIMIT = 500
_CONFLICT_LIMIT = 200


class Feed:
    """The feed of one page on one room.

    Args:
        ws: the accepted websocket.
        room: the room it watches.
        grant: the token's grant (``None`` on a hub without a secret).
        current: the room the hub holds under that name now; when it is no longer
            ``room`` (the hub unloaded an idle room), the feed closes with 1012 and the
            page reconnects to the room loaded again.
    """

    def __init__(
        self,
        ws: ServerConnection,
        room: Room,
        grant: Grant | None,
        current: Callable[[], Room | None] | None = None,
    ) -> None:
        self.ws = ws
        self.room = room
        self.grant = grant
        self._current = current or (lambda: room)
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(MAX_QUEUE)
        self._loop = asyncio.get_running_loop()
        self._state_due = False
        self._state_sent = 0.0
        self._merges: deque[float] = deque()
        self._last_agents: Any = None
        self._last_connections: Any = None
        self._closed = False

    # -- pushed by the room and the hub -----------------------------------------------
    def push(self, event: dict[str, Any]) -> None:
        """Queue ``event`` for the page (event-loop thread); closes a feed that lags."""
        if self._closed:
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self._closed = True
            log.info("inspector feed of room %s too slow: closed", self.room.name)
            task = asyncio.ensure_future(self.ws.close(1013, "inspector feed too slow"))
            task.add_done_callback(lambda t: t.exception())

    def _on_change(self, change: StateUpdate) -> None:
        # may run on a worker thread (durable states): hand over to the loop
        event = change_event(change)
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._changed, event)

    def _changed(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        self._merges.append(now)
        self.push(event)
        if not self._state_due:  # at once after a quiet spell, else once per interval
            self._state_due = True
            wait = self._state_sent + STATE_INTERVAL - now
            if wait <= 0:
                self._loop.call_soon(self._send_state)
            else:
                self._loop.call_later(wait, self._send_state)

    def _send_state(self) -> None:
        self._state_due = False
        self._state_sent = time.monotonic()
        if self._current() is self.room:
            self.push(self._state_event())

    # -- events built here --------------------------------------------------------------
    def _state_event(self) -> dict[str, Any]:
        content, token = self.room.state.read()
        return {
            "type": "state",
            "state": jsonable(content),
            "token": token.to_text(),
            "seq": self.room.state.position,
        }

    def _agents(self) -> list[dict[str, Any]]:
        """Each client with an awareness state, once, with the connection controlling it.

        ``connection`` is ``None`` for a client announced through another hub (cluster).
        """
        return [
            {
                "client": entry.client,
                "connection": None if owner is None else f"conn-{owner}",
                "state": state_value(entry.state),
            }
            for entry, owner in self.room.awareness.clients()
        ]

    def _connections(self) -> list[dict[str, Any]]:
        return [
            {
                "connection": session.label,
                "remote": session.remote,
                "role": "write" if session.can_write else "read",
            }
            for session in list(self.room.sessions.values())
        ]

    def _tick(self) -> None:
        agents = self._agents()
        if agents != self._last_agents:
            self._last_agents = agents
            self.push({"type": "agents", "agents": agents})
        connections = self._connections()
        if connections != self._last_connections:
            self._last_connections = connections
            self.push({"type": "connections", "connections": connections})

    def _stats(self) -> dict[str, Any]:
        now = time.monotonic()
        while self._merges and self._merges[0] < now - 10.0:
            self._merges.popleft()
        return {
            "type": "stats",
            "connections": len(self.room.sessions),
            "size": self.room.size,
            "changes_per_s": round(len(self._merges) / 10.0, 2),
            "seq": self.room.state.position,
            "durable": self.room.state.store is not None,
        }

    # -- queries from the page ------------------------------------------------------------
    def _answer(self, query: dict[str, Any]) -> Any:
        """The result of one query (runs on a worker thread: may read the store)."""
        state = self.room.state
        op = query.get("op")
        if op == "state":
            return self._state_event()
        if state.store is None:
            raise LookupError("no_history", "this room is in memory: it keeps no history")
        if op == "history":
            entries = state.history(
                agent=query.get("agent") or None,
                path=query.get("path") or None,
                since=query.get("since"),
                limit=int(query.get("limit") or _HISTORY_LIMIT),
            )
            return [history_event(e) for e in entries]
        if op == "at":
            return jsonable(state.at(VersionVector.from_text(str(query.get("token")))))
        if op == "blame":
            return blame_event(state.blame(query.get("path")))
        if op == "conflicts":
            records = state.conflicts(query.get("path") or None, query.get("since"))
            return [conflict_event(r) for r in records[-_CONFLICT_LIMIT:]]
        raise LookupError("unknown_op", f"unknown query {op!r}")

    async def _reply(self, text: str | bytes) -> None:
        if await self._expired():  # a query that came after the token's exp: not answered
            return
        try:
            query = json.loads(text)
            if not isinstance(query, dict):
                raise ValueError("a query is a JSON object")
        except ValueError as exc:
            self.push({"type": "reply", "id": None, "ok": False, "error": _error("bad_query", exc)})
            return
        try:
            result = await asyncio.to_thread(self._answer, query)
        except LookupError as exc:
            code, message = exc.args if len(exc.args) == 2 else ("not_found", str(exc))
            self.push({"type": "reply", "id": query.get("id"), "ok": False,
                       "error": {"code": code, "message": message}})  # fmt: skip
            return
        except (CrdtStateError, ValueError, TypeError) as exc:
            code = getattr(exc, "code", "bad_query")
            self.push({"type": "reply", "id": query.get("id"), "ok": False,
                       "error": _error(str(code), exc)})  # fmt: skip
            return
        self.push({"type": "reply", "id": query.get("id"), "op": query.get("op"), "ok": True,
                   "result": result})  # fmt: skip

    # -- the connection -----------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the page until it leaves or the hub stops."""
        unsubscribe = self.room.state.subscribe(self._on_change)
        writer = asyncio.create_task(self._write())
        ticker = asyncio.create_task(self._ticker())
        try:
            role = "admin" if self.grant is None else self.grant.role
            self.push({"type": "hello", "room": self.room.name, "role": role})
            self.push(self._state_event())
            self._tick()
            self.push(self._stats())
            if self.room.state.store is not None:
                for op in ("history", "conflicts"):
                    result = await asyncio.to_thread(self._answer, {"op": op})
                    self.push({"type": op, op: result})
            async for text in self.ws:
                await self._reply(text)
        except ConnectionClosed:
            pass
        finally:
            self._closed = True
            unsubscribe()
            ticker.cancel()
            self._queue.put_nowait(None) if not self._queue.full() else None
            for task in (writer, ticker):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 1.0)

    async def _expired(self) -> bool:
        """Close the feed (1008, as a room connection) once its token expired; True then."""
        if self.grant is None or not token_expired(self.grant):
            return False
        self._closed = True
        await self.ws.close(CloseCode.POLICY_VIOLATION, TOKEN_EXPIRED_REASON)
        return True

    async def _ticker(self) -> None:
        beats = 0
        while True:
            await asyncio.sleep(_TICK)
            if await self._expired():  # a feed lives no longer than its token
                return
            if self._current() is not self.room:  # unloaded: the page comes back to the new one
                self._closed = True
                await self.ws.close(ROOM_UNLOADED, "room unloaded")
                return
            self._tick()
            beats += 1
            if beats % 4 == 0:
                self.push(self._stats())

    async def _write(self) -> None:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            try:
                await self.ws.send(json.dumps(event, separators=(",", ":"), default=repr))
            except ConnectionClosed:
                return


def _error(code: str, exc: BaseException) -> dict[str, str]:
    return {"code": code, "message": str(exc)}
