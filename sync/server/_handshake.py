"""The websocket handshake of the hub: room names, access tokens, refusals (no state).

The room is the URL path without its first ``/`` and without the query, exactly as the
reference y-websocket server names documents (``req.url.slice(1).split('?')[0]``):
``ws://host:port/triage/42`` is room ``triage/42`` and ``ws://host:port//etc/passwd`` is room
``/etc/passwd`` (a path, never a host). Names are made of ``A-Z a-z 0-9 . _ ~ - /`` and must fit
in a file name once stored (:func:`sync.server._store.room_file_fits`); others are refused at
the handshake (400, or 414 for a name too long). The access token travels as the ``token``
query parameter (what y-websocket's ``params`` option sends) or as
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Final
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from sync.wire.rooms import room_of_path

__all__ = ["ERROR_HEADER", "peer_address", "refuse", "request_token", "room_name"]

ERROR_HEADER: Final = "X-Crdt-State-Error"
"""The response header of a refused handshake naming why, as a stable code."""


def room_name(path: str) -> str | None:
    """The room named by a request path (``/triage/42?token=..`` → ``triage/42``), or None.

    The path without its first character and without the query, as y-websocket
    does; ``None`` when it is empty or has a character outside the room grammar
    (:mod:`sync.wire.rooms`, which the client checks its URLs with too).
    """
    return room_of_path(path)


def request_token(request: Request) -> str | None:
    """The access token of a handshake: ``?token=`` or ``Authorization: Bearer``."""
    query = parse_qs(urlsplit(request.path).query)
    if query.get("token"):
        return query["token"][0]
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def refuse(connection: ServerConnection, status: HTTPStatus, reason: str, code: str) -> Response:
    """The HTTP response refusing a handshake with ``status``.

    Args:
        connection: the handshake's connection.
        status: the HTTP status (400, 401, 403, 414, 503).
        reason: a short line for people, the response body; never anything secret
            (no token, no secret).
        code: the stable reason, sent in the :data:`ERROR_HEADER` header
            (``expired_token``, ``bad_signature``, ``wrong_room``, ``room_full``, ...),
            which clients turn into typed errors.
    """
    response = connection.respond(status, reason + "\n")
    response.headers = Headers(response.headers)
    response.headers[ERROR_HEADER] = code
    return response


def peer_address(ws: ServerConnection) -> str:
    """``host:port`` of the peer, for logs (``?`` when unknown)."""
    try:
        host, port = ws.remote_address[:2]
        return f"{host}:{port}"
    except (TypeError, ValueError):
        return "?"
