"""A hub session: one websocket connection joined to a room, and how its frames leave.

A frame is written to the socket at once when nothing waits before it and the socket's
write buffer is low; otherwise it waits in the session's bounded outbox
(:class:`~sync.server._outbound.Outbox`) for the hub's writer task. A session whose
outbox would overflow is marked and dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from websockets.asyncio.server import ServerConnection

from sync.server._framing import FrameCache, write_frames
from sync.server._outbound import Outbox
from sync.server.auth import Grant

__all__ = ["Session"]

_ids = itertools.count(1)


@dataclass(eq=False)
class Session:
    """One websocket connection joined to a room.

    Frames are written to ``connection`` at once when nothing is waiting
    before them and its write buffer is below ``write_limit`` bytes;
    otherwise ``outbox`` holds them, in order, for the hub's writer task
    (which waits for the client to read). When the outbox would hold more than
    ``max_outbox`` bytes the session is marked ``overflowed``, its outbox is
    cleared (its memory freed) and the hub disconnects it (close 1013).
    """

    grant: Grant | None
    remote: str
    max_outbox: int
    """Bytes of frames the outbox may hold (see :class:`~sync.server._outbound.Outbox`)."""
    id: int = field(default_factory=lambda: next(_ids))
    writer: str = field(default_factory=lambda: secrets.token_hex(16))
    """A random 128-bit identity: the scope of request ids sent without a writer."""
    outbox: Outbox = field(init=False)
    overflowed: bool = False
    on_overflow: Callable[[Session], None] | None = None
    connection: ServerConnection | None = None
    agent: str = ""
    """The agent its last merge request named (for logs; ``""``: none yet)."""
    busy: bool = False
    """True while the writer task is sending a frame taken from the outbox."""
    write_limit: int = 64 * 1024
    unsent: asyncio.Future[None] | None = None
    """Done once the answer to its last merge is sent (the hub handles its next message then)."""
    taken: bool = False
    """A merge of it was taken from the read callback and waits to be judged (hub only)."""
    told_read_only: bool = False
    """Its read-only token's permission-denied message was sent (once, on its first write)."""

    def __post_init__(self) -> None:
        self.outbox = Outbox(self.max_outbox)

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

    def enqueue_many(self, frames: Sequence[bytes], cache: FrameCache | None = None) -> None:
        """Queue ``frames`` for sending, in order (event-loop thread only).

        When nothing waits before them, they are written at once, together
        (one write to the socket for all of them; ``cache``: see
        :func:`~sync.server._framing.write_frames`).
        """
        if self.overflowed or not frames or self.outbox.closed:
            return  # dropped: the client is being dropped, or its handler has ended
        ws = self.connection
        if (
            ws is not None
            and not self.busy
            and self.outbox.empty()
            and ws.transport.get_write_buffer_size() < self.write_limit
        ):
            write_frames(ws, frames, cache)
            return
        for frame in frames:
            if not self.outbox.put(frame):
                self.overflowed = True
                self.outbox.close()  # frees what it held: the client is dropped
                if self.on_overflow is not None:
                    self.on_overflow(self)
                return
