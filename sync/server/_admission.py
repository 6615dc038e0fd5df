"""Admitting a websocket handshake: the room, the limits, the token and the grant.

The grant is kept until the connection's handler takes it.

:meth:`Admission.check` runs as the server's ``process_request``: it answers a refusal
(an HTTP response naming the reason in the ``X-Crdt-State-Error`` header) or records the
connection's :class:`~sync.server.auth.Grant`. :meth:`Admission.take` hands it to the
connection's handler. A handshake that never reaches its handler (refused by websockets
after the check, dropped, or cut short by the hub's shutdown) leaves no grant behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from sync.server._handshake import peer_address, refuse, request_token, room_name
from sync.server._store import room_file_fits
from sync.server.auth import AuthError, Grant, verify_token
from sync.server.limits import Limits
from sync.wire.rooms import BAD_ROOM_NAME, ROOM_NAME_TOO_LONG

__all__ = ["Admission"]

log = logging.getLogger("crdt_state.hub")


class Admission:
    """The hub's handshake checks and the grants waiting for their handlers.

    Args:
        secret: the HMAC secret of access tokens (``None``: everyone is admitted with
            no grant, i.e. full access).
        limits: the hub's connection limits.
        connections: how many connections the hub has now.
        room_sessions: how many sessions a loaded room has (0 when not loaded).
        serving: whether the hub still accepts connections.
    """

    def __init__(
        self,
        secret: str | None,
        limits: Limits,
        *,
        connections: Callable[[], int],
        room_sessions: Callable[[str], int],
        serving: Callable[[], bool],
    ) -> None:
        self.secret = secret
        self.limits = limits
        self.grants: dict[Any, tuple[str, Grant | None]] = {}
        """Grants by connection id, from the handshake check until the handler takes them."""
        self._connections = connections
        self._room_sessions = room_sessions
        self._serving = serving

    def check(self, connection: ServerConnection, request: Request) -> Response | None:
        """The server's ``process_request``: a refusal, or ``None`` with the grant kept."""
        name = room_name(request.path)
        if name is None:
            return refuse(connection, HTTPStatus.BAD_REQUEST, "bad room name", BAD_ROOM_NAME)
        if not room_file_fits(name):
            return refuse(
                connection,
                HTTPStatus.REQUEST_URI_TOO_LONG,
                "room name too long",
                ROOM_NAME_TOO_LONG,
            )
        if self._connections() >= self.limits.max_connections:
            return refuse(
                connection,
                HTTPStatus.SERVICE_UNAVAILABLE,
                "too many connections",
                "too_many_connections",
            )
        if self._room_sessions(name) >= self.limits.max_room_connections:
            return refuse(connection, HTTPStatus.SERVICE_UNAVAILABLE, "room is full", "room_full")
        grant: Grant | None = None
        if self.secret is not None:
            try:
                grant = verify_token(self.secret, request_token(request), name)
            except AuthError as exc:
                log.info("refused %s for room %s: %s", peer_address(connection), name, exc.code)
                return refuse(connection, HTTPStatus(exc.http_status), exc.reason, exc.code)
        self.grants[connection.id] = (name, grant)
        key = connection.id  # a handshake dropped before its handler starts leaks nothing
        connection.connection_lost_waiter.add_done_callback(lambda _: self.grants.pop(key, None))
        return None

    def responded(self, connection: ServerConnection, request: Request, response: Response) -> None:
        """Forget the grant of a handshake that does not open a connection.

        This is the server's ``process_response``: websockets may refuse a handshake
        after :meth:`check` passed it, or the hub may be stopping.
        """
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS or not self._serving():
            self.grants.pop(connection.id, None)

    def take(self, connection: ServerConnection) -> tuple[str | None, Grant | None]:
        """The room and grant of an opened connection; ``(None, None)`` if it has none."""
        return self.grants.pop(connection.id, (None, None))
