"""Limits a hub enforces, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """Size, connection and time limits of a hub.

    ``max_message``: largest websocket message accepted (bigger: close 1009).
    ``max_document``: largest encoded room document; a merge or update that
    would grow it past this is refused (merge: error reply; plain Yjs update:
    close 1009). ``max_awareness``: largest awareness message a client may send
    (bigger: close 1009); the room keeps one per connection. ``max_connections`` /
    ``max_room_connections``: handshakes beyond these are refused with HTTP 503.
    ``max_outbox_bytes``: bytes of frames queued for one client that reads
    slower than its room changes; past it the client is disconnected (close
    1013) and its queue freed (one frame bigger than this still goes to a
    client whose queue is empty). ``room_idle_seconds``: a room with no
    connection for this long is unloaded (its changes flushed, its file closed,
    its memory freed); it is loaded again on the next join.
    ``shutdown_grace``: seconds :meth:`Hub.stop` waits for clients to answer
    the close handshake before cutting their connections.
    ``max_merge_changes`` / ``max_merge_items`` / ``max_merge_depth``: most changes
    one merge request may carry, most JSON values its changes' values may hold
    together, deepest nesting of one value; a request over one of them is refused
    with an error result (``merge_too_many_changes``, ``merge_too_many_items``,
    ``merge_too_deep``) before it is judged, so that no single merge holds the
    event loop (every room) for long. ``max_merge_bytes``: largest merge request
    (message bytes); a bigger one (up to ``max_message``) is refused with
    ``merge_too_large`` without being decoded. Merge requests of 256 KiB or more are
    decoded on a worker thread.
    """

    max_message: int = 4 * 2**20
    max_document: int = 64 * 2**20
    max_awareness: int = 64 * 2**10
    max_connections: int = 10_000
    max_room_connections: int = 2_000
    max_outbox_bytes: int = 16 * 2**20
    room_idle_seconds: float = 300.0
    shutdown_grace: float = 0.5
    max_merge_bytes: int = 2**20
    max_merge_changes: int = 2_000
    max_merge_items: int = 20_000
    max_merge_depth: int = 64

    def __post_init__(self) -> None:
        for name in (
            "max_message",
            "max_document",
            "max_awareness",
            "max_connections",
            "max_room_connections",
            "max_outbox_bytes",
            "max_merge_bytes",
            "max_merge_changes",
            "max_merge_items",
            "max_merge_depth",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        for name in ("room_idle_seconds", "shutdown_grace"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"Limits.{name} must be a number >= 0, got {value!r}")
