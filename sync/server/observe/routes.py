"""The HTTP side of the hub: which request is which route, and the inspector's access rule.

Pure logic over a request's path and headers. Plain HTTP ``GET`` requests (no websocket
upgrade) to these paths are answered by the hub itself:

==========================  =============================================================
``/healthz``                liveness: ``200 ok`` while the event loop answers
``/readyz``                 readiness: rooms loadable, storage writable, on a cluster hub
                            Redis and PostgreSQL answering (``503`` otherwise)
``/metrics``                Prometheus text format
``/inspect``                the rooms the token may read (JSON or an HTML list)
``/inspect/<room>``         the inspector page of a room
==========================  =============================================================

A websocket upgrade to ``/inspect/<room>/feed`` is the page's live feed; every other
upgrade is a room, as before, so no room name is taken away from websocket clients
except those under ``inspect/`` that end in ``/feed``.

The inspector takes the same room tokens as the hub (the read role is enough) from
``?token=``, ``Authorization: Bearer`` or the ``crdt_inspect`` cookie. A page loaded
with ``?token=`` answers with a redirect to the same path without it that sets the
cookie (``HttpOnly; SameSite=Strict``), so the token leaves the address bar and the
history; the hub never logs request paths.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Final, Literal
from urllib.parse import parse_qs, urlencode, urlsplit

from websockets.http11 import Request

from sync.server._handshake import request_token, room_name

__all__ = ["COOKIE", "Route", "request_credential", "route_of", "strip_token", "token_cookie"]

COOKIE: Final = "crdt_inspect"

RouteKind = Literal["healthz", "readyz", "metrics", "rooms", "page", "feed"]


@dataclass(frozen=True, slots=True)
class Route:
    """What a request asks for; ``room`` for ``page`` and ``feed``."""

    kind: RouteKind
    room: str | None = None


def _is_upgrade(request: Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


def route_of(request: Request) -> Route | None:
    """The route of ``request``, or ``None`` when it is a room's websocket (or unknown)."""
    path = urlsplit(request.path).path
    if _is_upgrade(request):
        if path.startswith("/inspect/") and path.endswith("/feed"):
            name = room_name(path[len("/inspect") : -len("/feed")])
            return Route("feed", name) if name is not None else None
        return None
    if path in ("/healthz", "/readyz", "/metrics"):
        return Route(path[1:])  # type: ignore[arg-type]
    if path in ("/inspect", "/inspect/"):
        return Route("rooms")
    if path.startswith("/inspect/"):
        name = room_name(path[len("/inspect") :])
        return Route("page", name) if name is not None else None
    return None


def request_credential(request: Request) -> tuple[str | None, bool]:
    """The token of an inspector request, and whether it came in the URL.

    The URL (``?token=``) and ``Authorization: Bearer`` come first, then the cookie.
    """
    in_url = bool(parse_qs(urlsplit(request.path).query).get("token"))
    token = request_token(request)
    if token:
        return token, in_url
    try:
        cookie = SimpleCookie(request.headers.get("Cookie", ""))
    except CookieError:
        return None, False
    morsel = cookie.get(COOKIE)
    return (morsel.value or None) if morsel is not None else None, False


def strip_token(path: str) -> str:
    """``path`` without its ``token`` query parameter (other parameters kept)."""
    parts = urlsplit(path)
    query = [(k, v) for k, vs in parse_qs(parts.query).items() for v in vs if k != "token"]
    return parts.path + ("?" + urlencode(query) if query else "")


def token_cookie(token: str, expires: float, *, now: float | None = None) -> str:
    """The ``Set-Cookie`` value that keeps ``token`` for the inspector until ``expires``."""
    max_age = max(0, int(expires - (time.time() if now is None else now)))
    return f"{COOKIE}={token}; Max-Age={max_age}; Path=/inspect; HttpOnly; SameSite=Strict"
