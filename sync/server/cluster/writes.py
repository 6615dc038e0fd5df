"""A hub's sessions' writes on their way to the room's owner, each answered or its session closed.

A write (a Yjs update, a merge request) a hub receives is not applied locally: it goes to
the room's owner, directly when that owner is on this hub, else through the room's ``in``
stream. A session whose write may be lost (Redis down, the local owner stopped first) or
whose merge goes unanswered is closed with 1013 (try again later): its client reconnects
and sends again what was not answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from functools import partial

from sync.server._room import Room, Session
from sync.server.cluster.cluster_room import TRY_AGAIN_LATER, ClusterRoom
from sync.server.cluster.context import NodeContext
from sync.server.cluster.errors import ClusterUnavailable
from sync.server.cluster.forwarding import InCommands
from sync.server.cluster.owner import LocalWrite
from sync.server.cluster.streams import MERGE, UPDATE, InEntry
from sync.wire import protocol as p

__all__ = ["Writes"]

log = logging.getLogger("crdt_state.cluster")


class Writes:
    """The writes of one hub's sessions, handed to their rooms' owners (see the module doc).

    Args:
        node: the hub's node (its id, its outbox, its answer timeout, closing sessions).
        rooms: the node's open rooms, by name.
    """

    def __init__(self, node: NodeContext, rooms: Mapping[str, ClusterRoom]) -> None:
        self.node = node
        self.rooms = rooms
        self._last_in: dict[tuple[str, int], str] = {}
        """(room, session id) -> the ``in`` id of the session's newest write appended there."""
        self._broken: set[tuple[str, int]] = set()
        """(room, session id) of sessions closed because a write may be lost (a local one
        whose owner stopped, or one Redis did not take): their later writes are dropped."""
        self._in_commands: InCommands | None = None
        """Made at the first forwarded write: the node's key space is read as it starts."""

    async def forward_update(self, room: Room, session: Session, update: bytes) -> None:
        """Append a session's Yjs update to the room's ``in`` stream.

        When Redis does not answer, the session is closed with 1013 (try again later).
        """
        await self._append(room, session, UPDATE, update)

    async def forward_merge(
        self, room: Room, session: Session, request: p.MergeRequest, frame: bytes = b""
    ) -> None:
        """Append a session's merge request to the room's ``in`` stream.

        ``frame`` is the request as received (encoded again from ``request`` when
        empty). Its answer comes on ``out``; when none comes within ``answer_timeout``
        the session is closed with 1013.
        """
        cluster_room = self.rooms[room.name]
        cluster_room.answers.remember(session, request.request_id)
        await self._append(room, session, MERGE, frame or p.encode_message(request), request)

    async def _append(
        self,
        room: Room,
        session: Session,
        kind: str,
        data: bytes,
        request: p.MergeRequest | None = None,
    ) -> None:
        """Hand a session's write to the room's owner: directly when it is this hub, else ``in``.

        A write goes to this hub's owner loop directly (:meth:`RoomOwner.submit`: no
        ``XADD``, no read back, no encoding) when the owner takes it in the session's
        order (:meth:`RoomOwner.accepts`: every earlier write the session sent through
        ``in`` already taken into a batch). If that owner stops before publishing the
        write's batch, the session is closed with 1013 and its later writes are dropped
        until it leaves (its client reconnects and sends again what was not answered).
        """
        key = (room.name, session.id)
        if key in self._broken:  # closing: a lost local write must not be overtaken
            return
        cluster_room = self.rooms.get(room.name)
        owner = cluster_room.owner if cluster_room is not None else None
        if owner is not None and owner.accepts(self._last_in.get(key)):
            hub_id = self.node.hub_id
            entry = InEntry(kind, data, hub_id, session.id, session.label, session.writer)
            write = LocalWrite(entry, request)
            if owner.submit(write):
                write.done.add_done_callback(partial(self._local_done, room.name, session))
                return
        commands = self._in_commands
        if commands is None:
            commands = self._in_commands = InCommands(self.node.hub_id, self.node.key_space)
        command = commands.command(room.name, session, kind, data)
        try:
            self._last_in[key] = await self.node.outbox.append_packed(command)
        except ClusterUnavailable as exc:
            if key in self._broken:  # its other writes in flight failed alike: closed once
                return
            self._broken.add(key)  # later writes must not overtake this one: dropped too
            log.info("room %r: cannot forward a write (%s), closing its session", room.name, exc)
            self.node.close_session(session, TRY_AGAIN_LATER, "cluster unavailable")

    def _local_done(self, room: str, session: Session, done: asyncio.Future[None]) -> None:
        """A local write's batch was published, or its owner stopped first (see ``_append``)."""
        if done.cancelled() or done.exception() is None:
            return
        cluster_room = self.rooms.get(room)
        if cluster_room is None or cluster_room.room.sessions.get(session.id) is not session:
            return  # it left already: nothing to close, nothing to remember
        self._broken.add((room, session.id))
        log.info("room %r: the owner stopped before answering a write, closing its session", room)
        self.node.close_session(session, TRY_AGAIN_LATER, "owner stepped down")

    def forget(self, room: str, session: int) -> None:
        """Session ``session`` left ``room``: drop what was kept about its writes."""
        self._last_in.pop((room, session), None)
        if self._in_commands is not None:
            self._in_commands.forget(room, session)
        self._broken.discard((room, session))

    async def watch_answers(self) -> None:
        """Close the sessions whose forwarded merges went unanswered for ``answer_timeout``."""
        step = min(0.25, self.node.answer_timeout / 4)
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            for name, cluster_room in list(self.rooms.items()):
                for session in cluster_room.answers.overdue(now):
                    log.info("room %r: a merge went unanswered, closing %s", name, session.label)
                    self.node.close_session(session, TRY_AGAIN_LATER, "merge not answered in time")
