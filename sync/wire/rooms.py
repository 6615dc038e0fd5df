"""Room names as URL paths: the grammar a hub accepts, shared by the hub and its clients.

A room is named by the URL path without its first ``/`` (and without the query), as the
reference y-websocket server names documents: ``ws://host:port/triage/42`` is room
``triage/42``. A name is made of ``A-Z a-z 0-9 . _ ~ - /`` (no percent-escapes, no
spaces); anything else, or an empty name, the hub refuses at the handshake (HTTP 400,
``bad_room_name``). The client checks its URLs against the same rule before connecting.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "BAD_ROOM_NAME",
    "ROOM_NAME_REFUSALS",
    "ROOM_NAME_TOO_LONG",
    "is_room_name",
    "room_of_path",
]

_ROOM_NAME: Final = re.compile(r"^[A-Za-z0-9._~\-/]+$")

BAD_ROOM_NAME: Final = "bad_room_name"
"""The hub's refusal code (HTTP 400) of a path naming no room, or one outside the grammar."""
ROOM_NAME_TOO_LONG: Final = "room_name_too_long"
"""The hub's refusal code (HTTP 414) of a room whose files' names would be too long."""
ROOM_NAME_REFUSALS: Final = frozenset({BAD_ROOM_NAME, ROOM_NAME_TOO_LONG})
"""Refusals about the room's name: final (no hub takes the same URL)."""


def is_room_name(name: str) -> bool:
    """True when ``name`` is a room name a hub accepts (non-empty, in the grammar)."""
    return bool(name) and _ROOM_NAME.match(name) is not None


def room_of_path(path: str) -> str | None:
    """The room named by a request path (``/triage/42?token=..`` -> ``triage/42``), or None.

    The path without its first character and without the query, as y-websocket
    does; ``None`` when that is empty or has a character outside the room grammar.
    """
    name = path[1:].split("?", 1)[0]
    return name if is_room_name(name) else None
