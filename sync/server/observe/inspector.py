"""The hub's observability: HTTP routes, the inspector page and feeds, and metrics.

:class:`Inspector` wraps the hub's handshake and connection handler (a few lines in
:mod:`sync.server.hub`): plain HTTP requests to the routes of
:mod:`sync.server.observe.routes` are answered here, inspector feeds are served by
:class:`~sync.server.observe.feed.Feed`, and everything else goes to the hub as before.
The hub tells it about each judged merge (:meth:`Inspector.merge_judged`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from html import escape
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from sync.server._handshake import ERROR_HEADER, peer_address
from sync.server._room import Room
from sync.server._store import room_file
from sync.server.auth import AuthError, Grant, verify_token
from sync.server.observe import routes
from sync.server.observe.feed import Feed
from sync.server.observe.metrics import CONTENT_TYPE, HubMetrics
from sync.wire.protocol import MergeStatus, MergeStep, MessageType

__all__ = ["NO_SUCH_ROOM", "HubView", "Inspector", "ReadinessCheck"]

NO_SUCH_ROOM = 4404
"""Close code of a feed for a room that is neither loaded nor stored."""

log = logging.getLogger("crdt_state.inspect")

ProcessRequest = Callable[
    [ServerConnection, Request], "Response | Awaitable[Response | None] | None"
]
Handler = Callable[[ServerConnection], Awaitable[None]]
ReadinessCheck = Callable[[], Awaitable[str | None]]
"""An extra readiness check: ``None`` when fine, else what is wrong (e.g. a cluster link)."""

_PAGE_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'"
)


class HubView(Protocol):
    """What the inspector reads from the hub."""

    rooms: dict[str, Room]
    secret: str | None
    db: Path | None

    async def room(self, name: str) -> Room:
        """The room called ``name``, loaded (or created) on first use."""
        ...


class Inspector:
    """The observability side of one hub.

    Args:
        hub: the hub it serves.

    Attributes:
        metrics: the hub's :class:`HubMetrics`.
        readiness_checks: extra checks for ``/readyz`` (a cluster adds its links here).
        max_feeds: inspector feeds open at once; more are refused with 503.
    """

    max_feeds = 256

    def __init__(self, hub: HubView) -> None:
        self.hub = hub
        self.metrics = HubMetrics(lambda: len(hub.rooms))
        self.readiness_checks: list[ReadinessCheck] = []
        self.connection_class = self.metrics.connection_class()
        self._feeds: dict[str, set[Feed]] = {}
        self._pending: dict[Any, tuple[str, Grant | None]] = {}
        self._page: bytes | None = None

    @property
    def feeds(self) -> int:
        """Inspector feeds open now."""
        return sum(map(len, self._feeds.values()))

    # -- hooks the hub calls --------------------------------------------------------------
    def merge_judged(
        self, room: Room, agent: str, frame: bytes, started: float, *, durable: bool = False
    ) -> None:
        """Record one merge the hub judged and tell the room's feeds.

        Args:
            room: the room the merge was judged in.
            agent: the agent that sent it.
            frame: its result frame.
            started: the ``time.perf_counter()`` when judging began.
            durable: the merge is durable already (its answer was released): the
                durable-commit latency is the time until now, without waiting on the
                room's state for it.
        """
        now = time.perf_counter()
        feeds = self._feeds.get(room.name)
        seen = self._seen(room, agent, frame, bool(feeds))
        if seen is None:
            return
        status, policies, event = seen
        self.metrics.merge_judged(status, policies, now - started)
        if status != "error" and durable:
            self.metrics.durable_after(now - started)
        elif status != "error":
            room.state.when_durable(self._durable_later(started))
        if event is not None:
            for feed in list(feeds or ()):
                feed.push(event)

    def _durable_later(self, started: float) -> Callable[[BaseException | None], None]:
        """A ``when_durable`` callback recording the durable latency (on the loop thread)."""
        loop = asyncio.get_running_loop()
        record = self.metrics.durable_after

        def durable(error: BaseException | None) -> None:
            if error is None:  # the metrics are the loop thread's: hand over to it
                with contextlib.suppress(RuntimeError):  # the loop is gone
                    loop.call_soon_threadsafe(record, time.perf_counter() - started)

        return durable

    def merge_answered(
        self, room: Room, agent: str | None, frame: bytes, seconds: float | None, counted: bool
    ) -> None:
        """Record one merge a cluster judged, as its answer reaches this hub.

        In a cluster the room's owner judges every merge and publishes the answers for
        every hub; each hub calls this for every answer of the room, whichever hub it is
        for. Its feeds show them all; the metrics count only those this hub answered
        (``counted``), so each merge is counted once, by the hub its client talks to.

        Args:
            room: the room.
            agent: the agent that sent it (``None``: a client of another hub; the
                feed names the incoming agent of its first conflict, if any).
            frame: its result frame.
            seconds: from forwarding the merge to its answer (``None``: unknown, the
                session left); the merge and durable-commit latencies (an answer comes
                once its change is durable).
            counted: this hub forwarded it and answers the client.
        """
        feeds = self._feeds.get(room.name)
        if not counted and not feeds:
            return
        seen = self._seen(room, agent, frame, bool(feeds))
        if seen is None:
            return
        status, policies, event = seen
        if counted:
            self.metrics.merge_judged(status, policies, seconds)
            if status != "error" and seconds is not None:
                self.metrics.durable_after(seconds)
        if event is not None:
            if event["agent"] is None and event["conflicts"]:
                event["agent"] = event["conflicts"][0]["incoming_agent"]
            for feed in list(feeds or ()):
                feed.push(event)

    def _seen(
        self, room: Room, agent: str | None, frame: bytes, watched: bool
    ) -> tuple[str, list[str], dict[str, Any] | None] | None:
        """A merge result: its status, its conflicts' policies, the feed event if watched."""
        room.last_merge = time.time()
        if not watched and _accepted(frame):
            # the common case, nobody watching: an ok result lists no conflicts, so the
            # metrics need nothing else from the frame
            return "ok", [], None
        from sync.server.observe.events import merge_event

        event = merge_event(frame, agent)
        if event is None:
            return None
        policies = [c["policy"] or "unresolved" for c in event["conflicts"]]
        return event["status"], policies, event

    def process_request(self, inner: ProcessRequest) -> ProcessRequest:
        """The hub's handshake check ``inner`` with the HTTP routes in front of it."""

        async def process(connection: ServerConnection, request: Request) -> Response | None:
            route = routes.route_of(request)
            if route is None:
                response = inner(connection, request)
                if inspect.isawaitable(response):
                    response = await response
                if response is not None:
                    self.metrics.refused_connection(_reason(response))
                return response
            return await self._serve_route(connection, request, route)

        return process

    def handler(self, inner: Handler) -> Handler:
        """The hub's connection handler ``inner``, with feeds served here and counted."""

        async def handle(ws: ServerConnection) -> None:
            pending = self._pending.pop(ws.id, None)
            kind = "feed" if pending is not None else "room"
            gauge = self.metrics.connections.labels(kind=kind)
            gauge.inc()
            try:
                if pending is None:
                    await inner(ws)
                else:
                    await self._serve_feed(ws, *pending)
            finally:
                gauge.dec()

        return handle

    # -- routes ------------------------------------------------------------------------------
    async def _serve_route(
        self, connection: ServerConnection, request: Request, route: routes.Route
    ) -> Response | None:
        if route.kind == "healthz":
            return _respond(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        if route.kind == "metrics":
            return _respond(HTTPStatus.OK, self.metrics.render(), CONTENT_TYPE)
        if route.kind == "readyz":
            return await self._readyz()
        token, in_url = routes.request_credential(request)
        room = route.room if route.room is not None else "*"
        try:
            grant = self._verify(token, room)
        except AuthError as exc:
            self.metrics.refused_connection(exc.code)
            log.info(
                "inspector refused %s (%s): %s", peer_address(connection), route.kind, exc.code
            )
            status = HTTPStatus(exc.http_status)
            if route.kind == "rooms" and exc.code == "wrong_room":
                return _respond(status, b"an admin token (room '*') is required\n")
            return _respond(status, (exc.reason + "\n").encode())
        if route.kind == "feed":
            assert route.room is not None
            if self.feeds + len(self._pending) >= self.max_feeds:
                self.metrics.refused_connection("too many inspector feeds")
                return _respond(HTTPStatus.SERVICE_UNAVAILABLE, b"too many inspector feeds\n")
            self._pending[connection.id] = (route.room, grant)
            return None
        if in_url and token is not None:  # move the token into a cookie, out of the URL
            response = _respond(HTTPStatus.SEE_OTHER, b"", "text/plain")
            response.headers["Location"] = routes.strip_token(request.path)
            expires = grant.expires if grant is not None else time.time() + 3600
            response.headers["Set-Cookie"] = routes.token_cookie(token, expires)
            return response
        if route.kind == "rooms":
            return await self._rooms(request)
        return self._page_response()

    def _verify(self, token: str | None, room: str) -> Grant | None:
        if self.hub.secret is None:
            return None
        return verify_token(self.hub.secret, token, room)

    def _page_response(self) -> Response:
        if self._page is None:
            static = resources.files("sync.server.observe") / "static" / "inspector.html"
            self._page = static.read_bytes()
        response = _respond(HTTPStatus.OK, self._page, "text/html; charset=utf-8")
        response.headers["Content-Security-Policy"] = _PAGE_CSP
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def _readyz(self) -> Response:
        checks: dict[str, str] = {}
        for name, room in list(self.hub.rooms.items()):
            try:
                room.state.ensure_open()
            except Exception as exc:
                checks[f"room {name}"] = str(exc)
        if self.hub.db is not None:
            problem = await asyncio.to_thread(_writable, self.hub.db)
            if problem is not None:
                checks["storage"] = problem
        for check in self.readiness_checks:
            try:
                problem = await check()
            except Exception as exc:
                problem = f"check failed: {exc}"
            if problem is not None:
                checks[getattr(check, "__name__", "check")] = problem
        body = json.dumps({"ready": not checks, "problems": checks}).encode() + b"\n"
        status = HTTPStatus.OK if not checks else HTTPStatus.SERVICE_UNAVAILABLE
        return _respond(status, body, "application/json")

    async def _rooms(self, request: Request) -> Response:
        listing = await asyncio.to_thread(self._room_list)
        if "text/html" in request.headers.get("Accept", ""):
            rows = "".join(
                f'<tr><td><a href="/inspect/{escape(quote(r["name"]))}">{escape(r["name"])}</a>'
                f"</td><td>{r['connections']}</td><td>{r['size']}</td>"
                f"<td>{escape(_local(r['last_activity']))}</td></tr>"
                for r in listing
            )
            html = (
                "<!doctype html><meta charset=utf-8><title>crdt-state rooms</title>"
                "<style>body{font:14px system-ui;margin:2em}td,th{padding:4px 12px;"
                "text-align:left}</style><h1>Rooms</h1><table><tr><th>room</th>"
                f"<th>connections</th><th>bytes</th><th>last activity</th></tr>{rows}</table>"
            )
            response = _respond(HTTPStatus.OK, html.encode(), "text/html; charset=utf-8")
            response.headers["Content-Security-Policy"] = (
                "default-src 'none'; style-src 'unsafe-inline'"
            )
            return response
        body = json.dumps({"rooms": listing}).encode() + b"\n"
        return _respond(HTTPStatus.OK, body, "application/json")

    def _room_list(self) -> list[dict[str, Any]]:
        """Loaded rooms and the rooms stored under the hub's ``db`` directory, by name."""
        found: dict[str, dict[str, Any]] = {}
        db = self.hub.db
        if db is not None and db.is_dir():
            for file in db.glob("*.sqlite"):
                with contextlib.suppress(OSError):
                    stat = file.stat()
                    name = unquote(file.name[: -len(".sqlite")])
                    found[name] = {
                        "name": name,
                        "loaded": False,
                        "connections": 0,
                        "size": stat.st_size,
                        "last_activity": stat.st_mtime,
                    }
        for name, room in list(self.hub.rooms.items()):
            entry = found.setdefault(name, {"name": name, "last_activity": None})
            entry.update(loaded=True, connections=len(room.sessions), size=room.size)
            seen = room.last_merge
            if seen is not None:
                entry["last_activity"] = max(seen, entry["last_activity"] or 0.0)
        return sorted(found.values(), key=lambda r: r["name"])

    async def _serve_feed(self, ws: ServerConnection, name: str, grant: Grant | None) -> None:
        db = self.hub.db
        if name not in self.hub.rooms and (db is None or not room_file(db, name).exists()):
            # watching creates nothing: the page retries until an agent opens the room
            await ws.close(NO_SUCH_ROOM, "no such room")
            return
        room = await self.hub.room(name)
        feed = Feed(ws, room, grant, lambda: self.hub.rooms.get(name))
        feeds = self._feeds.setdefault(name, set())
        feeds.add(feed)
        try:
            await feed.run()
        finally:
            feeds.discard(feed)
            if not feeds:
                self._feeds.pop(name, None)


def _respond(status: HTTPStatus, body: bytes, content_type: str = "text/plain") -> Response:
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"
    headers["Connection"] = "close"
    return Response(status.value, status.phrase, headers, body)


def _reason(response: Response) -> str:
    """A refusal's reason as a metric label: its stable code, else its HTTP status.

    Never text from the request (a room name, say), so a client cannot grow the label set.
    """
    code = response.headers.get(ERROR_HEADER, "")
    if code and len(code) <= 40 and code.replace("_", "").isalnum():
        return code
    return str(response.status_code)


def _writable(db: Path) -> str | None:
    """``None`` when a file can be created in the directory ``db``, else why not."""
    probe = db / f".readyz-{os.getpid()}"
    try:
        db.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return f"storage not writable: {exc.strerror or exc}"
    return None


def _local(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


_OK_RESULT_HEAD = bytes((MessageType.MERGE, MergeStep.RESULT))


def _accepted(frame: bytes) -> bool:
    """Whether ``frame`` is a merge result with status ok, read from its header only.

    The header is ``MERGE RESULT varuint(request_id) varuint(status)``; anything unusual
    gives ``False``.
    """
    if not frame.startswith(_OK_RESULT_HEAD):
        return False
    pos = 2
    while pos < len(frame) and frame[pos] & 0x80:  # skip the request id
        pos += 1
    return pos + 1 < len(frame) and frame[pos + 1] == MergeStatus.OK
