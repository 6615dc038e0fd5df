"""A hub room: one shared state, the sessions joined to it, and their fan-out.

The room turns the changes of its :class:`~crdt_state.SharedState` (merges,
or Yjs updates from any client) into y-websocket update frames queued for
every session. Changes made during one event-loop iteration are sent as one
frame (their Yjs updates merged), and merge replies queued with
:meth:`Room.reply` follow it: a client always has a merge's update before its
reply. Changes may be made on worker threads (durable states wait for the
disk there); frames are always queued on the event loop's thread.

**Only durable changes leave the room.** For a durable state, an update frame
(and a sync answer queued with :meth:`Room.send_durable`) is held until every
change it carries is durable (:meth:`SharedState.when_durable`), and frames
leave in the order they were queued: a reply waits behind the update frames
queued before it, so no token in a reply names a change that is not durable
yet (for changes made on the loop's thread, as the hub makes them all: one
made on another thread reaches the room a moment later, and a reply queued
in between does not wait for it). So no client ever holds a change that a
hub restarted after a crash (SIGKILL, power loss with ``durability="full"``)
lacks: every base token a client sends is known to the restarted hub, and
nothing that was shown to anyone comes back from a client's replica as a
change without its request identity. A state in memory sends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from pycrdt import merge_updates

from crdt_state import SharedState, StateUpdate
from crdt_state.journal import call_on_loop
from sync.server._awareness import RoomAwareness
from sync.server._framing import FrameCache
from sync.server._session import Session
from sync.wire.protocol import encode_awareness, encode_update

__all__ = ["Room", "Session"]

log = logging.getLogger("crdt_state.hub")


def _nothing() -> None:
    """A closed room's listener removal (done already)."""


FailedReply: TypeAlias = Callable[[BaseException], bytes]
"""Builds the reply that replaces a merge's answer when its change could not be stored."""

_Frame: TypeAlias = tuple[Session, bytes, FailedReply | None]


@dataclass(slots=True, eq=False)
class _Round:
    """Frames queued together, sent together once ``ready``.

    ``update`` goes to every session joined at sending time, then each of
    ``frames`` to its session. ``replies`` says whether ``frames`` are merge
    replies (sent even if the round's changes failed to be stored: their
    tokens name only changes of earlier rounds; a reply given a
    :data:`FailedReply` is replaced by what it builds from the error) or durable
    content (dropped then). ``sent`` is done once the round's frames are queued
    for their sessions; then each of ``on_sent`` is called.
    """

    update: bytes | None
    frames: list[_Frame]
    replies: bool = True
    ready: bool = False
    error: BaseException | None = None
    sent: asyncio.Future[None] | None = None
    on_sent: list[Callable[[], None]] | None = None


class Room:
    """The shared state of one room name and the sessions that joined it."""

    def __init__(self, name: str, state: SharedState, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self._state = state
        self.before_read: Callable[[], None] | None = None
        """Called by :attr:`state` before it returns the state: a cluster replica applies
        the updates it only relayed so far (:meth:`relay`, :meth:`absorb`)."""
        self._absorbing: int | None = None  # the thread applying relayed updates (absorb)
        self.sessions: dict[int, Session] = {}
        self.awareness = RoomAwareness()
        """Every client's awareness state, and the session controlling it (by session id)."""
        self.size = len(state.get_update())
        """Encoded size of the document, kept as an upper bound (see would_exceed)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._unsubscribe = state.subscribe(self._on_change)
        self._updates: list[bytes] = []  # changes not yet sent, oldest first
        self._replies: list[_Frame] = []  # to send after them
        self._replies_durable = False  # a reply in _replies waits for the changes so far
        self._sent: asyncio.Future[None] | None = None  # of the round _replies will be in
        self._on_sent: list[Callable[[], None]] = []  # called once that round is sent
        self._flush_scheduled = False
        self._rounds: deque[_Round] = deque()  # queued, oldest first; sent once ready
        self._storage_failed = False
        self.last_merge: float | None = None
        """Unix time of the last merge judged in the room since it was loaded (inspector)."""

    @property
    def state(self) -> SharedState:
        """The room's state, holding every change the room sent to its sessions.

        Calls :attr:`before_read` first (when set), so a reader never sees a state that
        lacks an update relayed to the sessions (:meth:`relay`).
        """
        settle = self.before_read
        if settle is not None:
            settle()
        return self._state

    def relay(self, update: bytes) -> None:
        """Send ``update`` to every session as a change of the state, before the state has it.

        For a replica that applies the updates it follows later (a cluster hub): the
        sessions get it at once, in the same frame (and order) as any change of this
        loop turn; the state gets it from :meth:`absorb`, before it is next read
        (:attr:`before_read`). Event-loop thread only.
        """
        self.size += len(update)
        self._add(update)

    def absorb(self, update: bytes, agent: str) -> None:
        """Apply relayed updates (:meth:`relay`) to the state without sending them again.

        Raises what :meth:`SharedState.apply_update` raises. Any thread (one at a time).
        """
        self._absorbing = threading.get_ident()
        try:
            self._state.apply_update(update, agent=agent)
        finally:
            self._absorbing = None

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

    def leave(self, session: Session) -> bytes | None:
        """Forget ``session``; tell the others that the clients it controlled are gone.

        Returns:
            That awareness removal (``None``: it controlled none), for other hubs too.
        """
        self.sessions.pop(session.id, None)
        removal = self.awareness.leave(session.id)
        if removal is not None:
            self.broadcast(encode_awareness(removal))
        return removal

    def _on_change(self, change: StateUpdate) -> None:
        if self._absorbing == threading.get_ident():  # relayed already (and counted in size)
            return
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
        """Queue ``frame`` for ``session`` after every change made so far (loop thread only).

        It is sent once the update frames queued before it are sent, so once the
        changes they carry are durable.
        """
        self._replies.append((session, frame, None))
        self._schedule()

    def reply_once_durable(
        self,
        session: Session,
        frame: bytes,
        failed: FailedReply,
        on_sent: Callable[[], None] | None = None,
    ) -> asyncio.Future[None]:
        """Queue ``frame`` for ``session`` once every change made so far is durable.

        For the answer of a merge made with ``wait=False``: it goes out with the update
        frame carrying the merge (the pending changes of this loop iteration are sent as
        one frame, then the replies), once the state reported every change made before
        this call durable; if one of them cannot be stored, ``failed(error)`` is sent
        instead. Call from the loop thread only.

        ``on_sent`` is called (on the loop thread) once the frame, or its replacement, is
        queued for the session: without waiting on the returned future (no task wakes up
        for it). An exception it raises is logged.

        Returns:
            A future (shared by the replies of one round) done once the frame is
            queued for the session, that is once the merge is durable or failed.
        """
        self._replies.append((session, frame, failed))
        self._replies_durable = True
        if on_sent is not None:
            self._on_sent.append(on_sent)
        self._schedule()
        if self._sent is None:
            self._sent = self._loop.create_future()
        return self._sent

    def send_durable(self, session: Session, frame: bytes) -> None:
        """Queue ``frame`` for ``session`` once every change made so far is durable.

        It goes after the frames queued before it. Call from the loop thread only.

        For frames carrying the room's content, e.g. a sync step 2 built from
        ``state.get_update()`` just before this call. Dropped, like the
        changes, if they can never be stored.
        """
        self.flush()  # what is queued so far goes first
        self._queue(_Round(None, [(session, frame, None)], replies=False), durable=True)

    def flush(self) -> None:
        """Queue the pending changes as one update frame to every session, then the replies.

        The frames are sent as soon as the changes are durable and every frame
        queued before them is sent; each session gets the frames that become
        ready together in one write.
        """
        self._flush_scheduled = False
        updates, self._updates = self._updates, []
        replies, self._replies = self._replies, []
        durable, self._replies_durable = self._replies_durable, False
        sent, self._sent = self._sent, None
        on_sent = None
        if self._on_sent:
            on_sent, self._on_sent = self._on_sent, []
        if not updates and not replies:
            return
        frame: bytes | None = None
        if updates:
            frame = encode_update(
                updates[0] if len(updates) == 1 else bytes(merge_updates(*updates))
            )
        self._queue(
            _Round(frame, replies, sent=sent, on_sent=on_sent), durable=durable or frame is not None
        )

    def _queue(self, round_: _Round, *, durable: bool) -> None:
        self._rounds.append(round_)
        if not durable:
            round_.ready = True
            self._release()
            return

        def done(error: BaseException | None) -> None:
            if threading.get_ident() == self._loop_thread:
                self._ready(round_, error)
                return
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody to send to
                call_on_loop(self._loop, self._ready, round_, error)  # one wake per burst

        self._state.when_durable(done)

    def _ready(self, round_: _Round, error: BaseException | None) -> None:
        round_.ready, round_.error = True, error
        if error is not None and not self._storage_failed:
            self._storage_failed = True
            log.error(
                "room %s: changes could not be stored, they are not sent to anyone: %s",
                self.name,
                error,
            )
        self._release()

    def _release(self) -> None:
        """Send the rounds that are ready, oldest first, up to the first one still waiting."""
        if not self._rounds or not self._rounds[0].ready:
            return
        rounds: list[_Round] = []
        while self._rounds and self._rounds[0].ready:
            rounds.append(self._rounds.popleft())
        sessions = list(self.sessions.values())
        out: dict[int, tuple[Session, list[bytes]]] = {}
        for round_ in rounds:
            error = round_.error
            if round_.update is not None and error is None:
                for session in sessions:
                    out.setdefault(session.id, (session, []))[1].append(round_.update)
            if round_.replies or error is None:
                for session, frame, failed in round_.frames:
                    if error is not None and failed is not None:
                        frame = failed(error)
                    out.setdefault(session.id, (session, []))[1].append(frame)
        cache: FrameCache = {}  # the update frames, framed once for every session
        for session, frames in out.values():
            session.enqueue_many(frames, cache)
        for round_ in rounds:
            if round_.sent is not None and not round_.sent.done():
                round_.sent.set_result(None)
        for round_ in rounds:
            for call in round_.on_sent or ():
                try:
                    call()
                except Exception:  # an observer's failure never stops the room's sending
                    log.exception("room %s: error in a reply's on_sent callback", self.name)

    def broadcast(self, frame: bytes, *, exclude: int | None = None) -> None:
        """Queue ``frame`` for every session but ``exclude`` (event-loop thread only)."""
        for session in list(self.sessions.values()):
            if session.id != exclude:
                session.enqueue(frame)

    def close(self) -> None:
        """Stop fanning out changes and close the room's state.

        The room is then free of reference cycles: the listener removal holds the room
        (through its bound method), so it is dropped here, and an unloaded room (its
        document, its Rust allocations) is freed at once by reference counting rather
        than left for the cyclic collector.
        """
        unsubscribe, self._unsubscribe = self._unsubscribe, _nothing
        unsubscribe()
        self.before_read = None
        self._state.close()
