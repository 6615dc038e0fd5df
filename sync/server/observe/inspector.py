"""The hub's observability: HTTP routes, the inspector page and feeds, and metrics.

:class:`Inspector` wraps the hub's handshake and connection handler (a few lines in
:mod:`sync.server.hub`): plain HTTP requests to the routes of
:mod:`sync.server.observe.routes` are answered here (readiness and the room list by
:mod:`sync.server.observe.pages`), inspector feeds are served by
:class:`~sync.server.observe.feed.Feed`, and everything else goes to the hub as before.
The hub tells it about each judged merge (:meth:`Inspector.merge_judged`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from sync.server._handshake import ERROR_HEADER, peer_address
from sync.server._room import Room
from sync.server.auth import AuthError, Grant, verify_token
from sync.server.observe import pages, routes
from sync.server.observe.feed import Feed
from sync.server.observe.metrics import CONTENT_TYPE, HubMetrics
from sync.server.observe.pages import HubView, ReadinessCheck, respond
from sync.wire.protocol import MergeStatus, MergeStep, MessageType

__all__ = ["NO_SUCH_ROOM", "HubView", "Inspector", "ReadinessCheck"]

NO_SUCH_ROOM = 4404
"""Close code of a feed for a room that is neither loaded nor stored."""

log = logging.getLogger("crdt_state.inspect")

ProcessRequest = Callable[
    [ServerConnection, Request], "Response | Awaitable[Response | None] | None"
]
Handler = Callable[[ServerConnection], Awaitable[None]]

_PAGE_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'"
)


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
        self.metrics = HubMetrics(
            lambda: len(hub.rooms), lambda: sum(map(hub.held_bytes, list(hub.rooms)))
        )
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
        self.metrics.merge_judged(status, policies, now - started, _error_code(event))
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
            self.metrics.merge_judged(status, policies, seconds, _error_code(event))
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
            return respond(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        if route.kind == "metrics":
            return respond(HTTPStatus.OK, self.metrics.render(), CONTENT_TYPE)
        if route.kind == "readyz":
            return await pages.readiness(self.hub, self.readiness_checks)
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
                refused = respond(status, b"an admin token (room '*') is required\n")
            else:
                refused = respond(status, (exc.reason + "\n").encode())
            refused.headers[ERROR_HEADER] = exc.code  # as a room's handshake refusal says it
            return refused
        if route.kind == "feed":
            assert route.room is not None
            if self.feeds + len(self._pending) >= self.max_feeds:
                self.metrics.refused_connection("too many inspector feeds")
                return respond(HTTPStatus.SERVICE_UNAVAILABLE, b"too many inspector feeds\n")
            self._pending[connection.id] = (route.room, grant)
            return None
        if in_url and token is not None:  # move the token into a cookie, out of the URL
            response = respond(HTTPStatus.SEE_OTHER, b"", "text/plain")
            response.headers["Location"] = routes.strip_token(request.path)
            expires = grant.expires if grant is not None else time.time() + 3600
            response.headers["Set-Cookie"] = routes.token_cookie(token, expires)
            return response
        if route.kind == "rooms":
            return await pages.rooms(self.hub, request)
        return self._page_response()

    def _verify(self, token: str | None, room: str) -> Grant | None:
        if self.hub.secret is None:
            return None
        return verify_token(self.hub.secret, token, room)

    def _page_response(self) -> Response:
        if self._page is None:
            static = resources.files("sync.server.observe") / "static" / "inspector.html"
            self._page = static.read_bytes()
        response = respond(HTTPStatus.OK, self._page, "text/html; charset=utf-8")
        response.headers["Content-Security-Policy"] = _PAGE_CSP
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def _serve_feed(self, ws: ServerConnection, name: str, grant: Grant | None) -> None:
        if not await self.hub.has_room(name):  # a cluster hub asks its store
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


def _reason(response: Response) -> str:
    """A refusal's reason as a metric label: its stable code, else its HTTP status.

    Never text from the request (a room name, say), so a client cannot grow the label set.
    """
    code = response.headers.get(ERROR_HEADER, "")
    if code and len(code) <= 40 and code.replace("_", "").isalnum():
        return code
    return str(response.status_code)


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


def _error_code(event: dict[str, Any] | None) -> str | None:
    """The error code of a merge event (``None``: no event, or no error in it)."""
    error = event.get("error") if event is not None else None
    return error.get("code") if isinstance(error, dict) else None
