"""Limits a hub enforces, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """Size and connection limits of a hub.

    ``max_message``: largest websocket message accepted (bigger: close 1009).
    ``max_document``: largest encoded room document; a merge or update that
    would grow it past this is refused (merge: error reply; plain Yjs update:
    close 1009). ``max_connections`` / ``max_room_connections``: handshakes
    beyond these are refused with HTTP 503. ``max_outbox``: frames queued for
    one slow client before it is disconnected (close 1013).
    """

    max_message: int = 4 * 2**20
    max_document: int = 64 * 2**20
    max_connections: int = 10_000
    max_room_connections: int = 2_000
    max_outbox: int = 10_000
