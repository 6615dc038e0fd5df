"""Asking a room's sessions for the writes they hold beyond the room (pure of I/O).

A room's owner may lose writes it had not committed: a stock Yjs client's write built on
an update the hub never saw waits in the owner's judge (in memory, as Yjs does), and a
plain update forwarded to ``in`` is gone when Redis loses its streams. A stock client
never sends a write twice; but any Yjs peer answers sync step 1 with the difference
between its document and the state vector it was given (sync step 2). So when a room's
judge may have lost something, each hub sends its writing sessions sync step 1 with the
replica's state vector, and what comes back goes to the owner as any write of theirs;
what the room has already applies as nothing.
"""

from __future__ import annotations

from sync.server._room import Room
from sync.wire import protocol as p

__all__ = ["ask_for_missing"]


def ask_for_missing(room: Room) -> int:
    """Queue sync step 1 (the replica's state vector) for ``room``'s writing sessions.

    Read-only sessions cannot hold writes and are not asked. Event-loop thread only.

    Returns:
        How many sessions were asked.
    """
    frame = p.encode_sync_step1(room.state.token.to_state())
    asked = 0
    for session in list(room.sessions.values()):
        if session.can_write:
            session.enqueue(frame)
            asked += 1
    return asked
