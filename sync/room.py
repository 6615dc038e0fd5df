"""A hub room: one shared state, the sessions joined to it, and their fan-out.

The room turns the changes of its :class:`~crdt_state.SharedState` (merges,
or Yjs updates from any client) into y-websocket update frames queued for
every session. Changes made during one event-loop iteration are sent as one
frame (their Yjs updates merged), and merge replies queued with
:meth:`Room.reply` follow it: a client always has a merge's update before its
reply. Changes may be made on worker threads (durable states wait for the
disk there); frames are always queued on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pycrdt import merge_updates
from websockets.asyncio.server import ServerConnection, broadcast
from websockets.protocol import State

from crdt_state import SharedState, StateUpdate

from .auth import Grant
from .awareness import removal_update, safe_clients
from .protocol import encode_awareness, encode_update

__all__ = ["Room", "Session"]

_ids = itertools.count(1)


@dataclass(eq=False)
class Session:
    """One websocket connection joined to a room.

    Frames are written to ``connection`` at once when nothing is waiting
    before them and its write buffer is below ``write_limit`` bytes;
    otherwise ``outbox`` holds them, in order, for the hub's writer task
    (which waits for the client to read). When the outbox overflows the
    session is marked ``overflowed`` and the hub disconnects it.
    """

    grant: Grant | None
    remote: str
    max_outbox: int
    id: int = field(default_factory=lambda: next(_ids))
    writer: str = field(default_factory=lambda: secrets.token_hex(16))
    """A random 128-bit identity: the scope of request ids sent without a writer."""
    outbox: asyncio.Queue[bytes | None] = field(init=False)
    overflowed: bool = False
    on_overflow: Callable[[Session], None] | None = None
    connection: ServerConnection | None = None
    busy: bool = False
    """True while the writer task is sending a frame taken from the outbox."""
    write_limit: int = 64 * 1024

    def __post_init__(self) -> None:
        self.outbox = asyncio.Queue(maxsize=self.max_outbox)

    @property
    def can_write(self) -> bool:
        """True unless the session's token grants read access only."""
        return self.grant is None or self.grant.can_write

    @property
    def label(self) -> str:
        return f"conn-{self.id}"

    def enqueue(self, frame: bytes) -> None:
        """Queue ``frame`` for sending (event-loop thread only)."""
        self.enqueue_many((frame,))

    def enqueue_many(self, frames: Sequence[bytes]) -> None:
        """Queue ``frames`` for sending, in order (event-loop thread only).

        When nothing waits before them, they are written at once, together
        (one write to the socket for all of them).
        """
        if self.overflowed or not frames:
            return
        ws = self.connection
        if (
            ws is not None
            and not self.busy
            and self.outbox.empty()
            and ws.transport.get_write_buffer_size() < self.write_limit
        ):
            _write_now(ws, frames)
            return
        for frame in frames:
            try:
                self.outbox.put_nowait(frame)
            except asyncio.QueueFull:
                self.overflowed = True
                if self.on_overflow is not None:
                    self.on_overflow(self)
                return


def _write_now(ws: ServerConnection, frames: Sequence[bytes]) -> None:
    """Write binary ``frames`` to ``ws`` in one socket write (as ``broadcast`` does, batched)."""
    if len(frames) == 1:
        broadcast((ws,), frames[0])
        return
    if ws.protocol.state is not State.OPEN or ws.send_in_progress is not None:
        return  # closing: frames to a closing connection are dropped, like broadcast()
    try:
        for frame in frames:
            ws.protocol.send_binary(frame)
        data = ws.protocol.data_to_send()
        ws.transport.write(b"".join(data))
    except Exception as exc:  # the connection broke: its handler sees it and cleans up
        ws.logger.warning("could not write to connection: %s", exc)


class Room:
    """The shared state of one room name and the sessions that joined it."""

    def __init__(self, name: str, state: SharedState, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.state = state
        self.sessions: dict[int, Session] = {}
        self.awareness: dict[int, bytes] = {}
        self.size = len(state.get_update())
        """Encoded size of the document, kept as an upper bound (see would_exceed)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._unsubscribe = state.subscribe(self._on_change)
        self._updates: list[bytes] = []  # changes not yet sent, oldest first
        self._replies: list[tuple[Session, bytes]] = []  # to send after them
        self._flush_scheduled = False

    def would_exceed(self, extra: int, limit: int) -> bool:
        """True when adding about ``extra`` bytes would take the document past ``limit``.

        ``size`` only grows with each change (an upper bound, cheap to keep); it
        is measured again from the document before a change is refused.
        """
        if self.size + extra <= limit:
            return False
        self.size = len(self.state.get_update())
        return self.size + extra > limit

    def join(self, session: Session) -> None:
        self.sessions[session.id] = session

    def leave(self, session: Session) -> None:
        """Forget ``session``; tell the others that the peers it announced are gone."""
        self.sessions.pop(session.id, None)
        payload = self.awareness.pop(session.id, None)
        clients = safe_clients(payload) if payload is not None else {}
        if clients:
            self.broadcast(encode_awareness(removal_update(clients)))

    def _on_change(self, change: StateUpdate) -> None:
        self.size += len(change.update)
        if threading.get_ident() == self._loop_thread:
            self._add(change.update)
        else:
            self._loop.call_soon_threadsafe(self._add, change.update)

    def _add(self, update: bytes) -> None:
        self._updates.append(update)
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def reply(self, session: Session, frame: bytes) -> None:
        """Queue ``frame`` for ``session`` after every change made so far (loop thread only)."""
        self._replies.append((session, frame))
        self._schedule()

    def flush(self) -> None:
        """Send the pending changes as one update frame to every session, then the replies.

        Each session gets its frames of this round in one write.
        """
        self._flush_scheduled = False
        updates, self._updates = self._updates, []
        replies, self._replies = self._replies, []
        mine: dict[int, list[bytes]] = {}
        for session, frame in replies:
            mine.setdefault(session.id, []).append(frame)
        if updates:
            update = updates[0] if len(updates) == 1 else bytes(merge_updates(*updates))
            frame = encode_update(update)
            for session in list(self.sessions.values()):
                session.enqueue_many([frame, *mine.pop(session.id, ())])
        for session, _frame in replies:  # sessions that got no update frame this round
            if session.id in mine:
                session.enqueue_many(mine.pop(session.id))

    def broadcast(self, frame: bytes, *, exclude: int | None = None) -> None:
        """Queue ``frame`` for every session but ``exclude`` (event-loop thread only)."""
        for session in list(self.sessions.values()):
            if session.id != exclude:
                session.enqueue(frame)

    def close(self) -> None:
        """Stop fanning out changes and close the room's state."""
        self._unsubscribe()
        self.state.close()
