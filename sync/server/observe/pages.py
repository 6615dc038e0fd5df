"""The inspector's plain HTTP answers: readiness, the room list, and the response helper.

No websocket here: :func:`readiness` (``/readyz``), :func:`rooms` (``/rooms``, HTML for
a browser, JSON otherwise) and :func:`respond` (every plain answer: ``no-store``,
``Connection: close``) read the hub through :class:`HubView`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from html import escape
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from sync.server._room import Room
from sync.server._store import room_directory_problem

__all__ = ["HubView", "ReadinessCheck", "readiness", "respond", "room_list", "rooms"]

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""An extra readiness check: ``None`` when fine, else what is wrong (e.g. a cluster link)."""


class HubView(Protocol):
    """What the inspector reads from the hub."""

    rooms: dict[str, Room]
    secret: str | None
    db: Path | None

    async def room(self, name: str) -> Room:
        """The room called ``name``, loaded (or created) on first use."""
        ...

    async def has_room(self, name: str) -> bool:
        """True when ``name`` is loaded or stored (asking loads and creates nothing)."""
        ...

    def held_bytes(self, room: str) -> int:
        """Bytes of peers' updates ``room``'s judge holds (0: none, or not judged here)."""
        ...


async def readiness(hub: HubView, extra: Sequence[ReadinessCheck]) -> Response:
    """``/readyz``: 200 when all is well, else 503 with what is wrong (JSON).

    Well: every loaded room's store is open, the ``db`` directory takes a new file (a
    hub without one, such as a cluster hub, has no such check), and every ``extra``
    check returns ``None`` (a cluster hub's: ``redis`` and ``postgres`` answer).
    """
    checks: dict[str, str] = {}
    for name, room in list(hub.rooms.items()):
        try:
            room.state.ensure_open()
        except Exception as exc:
            checks[f"room {name}"] = str(exc)
    if hub.db is not None:
        problem = await asyncio.to_thread(_writable, hub.db)
        if problem is not None:
            checks["storage"] = problem
    for check in extra:
        try:
            problem = await check()
        except Exception as exc:
            problem = f"check failed: {exc}"
        if problem is not None:
            checks[getattr(check, "__name__", "check")] = problem
    body = json.dumps({"ready": not checks, "problems": checks}).encode() + b"\n"
    status = HTTPStatus.OK if not checks else HTTPStatus.SERVICE_UNAVAILABLE
    return respond(status, body, "application/json")


async def rooms(hub: HubView, request: Request) -> Response:
    """``/rooms``: the loaded and stored rooms, as HTML for a browser, else as JSON."""
    listing = await asyncio.to_thread(room_list, hub)
    if "text/html" in request.headers.get("Accept", ""):
        rows = "".join(
            f'<tr><td><a href="/inspect/{escape(quote(r["name"]))}">{escape(r["name"])}</a>'
            f"</td><td>{r['connections']}</td><td>{r['size']}</td>"
            f"<td>{r.get('held_bytes', '-')}</td>"
            f"<td>{escape(_local(r['last_activity']))}</td></tr>"
            for r in listing
        )
        html = (
            "<!doctype html><meta charset=utf-8><title>crdt-state rooms</title>"
            "<style>body{font:14px system-ui;margin:2em}td,th{padding:4px 12px;"
            "text-align:left}</style><h1>Rooms</h1><table><tr><th>room</th>"
            "<th>connections</th><th>bytes</th><th>held bytes</th><th>last activity</th>"
            f"</tr>{rows}</table>"
        )
        response = respond(HTTPStatus.OK, html.encode(), "text/html; charset=utf-8")
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; style-src 'unsafe-inline'"
        )
        return response
    body = json.dumps({"rooms": listing}).encode() + b"\n"
    return respond(HTTPStatus.OK, body, "application/json")


def room_list(hub: HubView) -> list[dict[str, Any]]:
    """Loaded rooms and the rooms stored under the hub's ``db`` directory, by name."""
    found: dict[str, dict[str, Any]] = {}
    db = hub.db
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
    for name, room in list(hub.rooms.items()):
        entry = found.setdefault(name, {"name": name, "last_activity": None})
        entry.update(
            loaded=True,
            connections=len(room.sessions),
            size=room.size,
            held_bytes=hub.held_bytes(name),
        )
        seen = room.last_merge
        if seen is not None:
            entry["last_activity"] = max(seen, entry["last_activity"] or 0.0)
    return sorted(found.values(), key=lambda r: r["name"])


def respond(status: HTTPStatus, body: bytes, content_type: str = "text/plain") -> Response:
    """A plain HTTP answer: never cached, the connection closed after it."""
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"
    headers["Connection"] = "close"
    return Response(status.value, status.phrase, headers, body)


def _writable(db: Path) -> str | None:
    """``None`` when a file can be created in the directory ``db``, else why not."""
    problem = room_directory_problem(db)
    return None if problem is None else f"storage not writable: {problem}"


def _local(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"
