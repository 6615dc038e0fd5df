"""The merges one hub forwarded for a room's sessions, and the answers that come back.

A merge this hub forwarded to the room's owner is remembered until its answer arrives on
``out``. The answers addressed to this hub go to their sessions (a merge's result, or a
refused update closing its session with 1003), and every answer of the room is told to
the hub's inspector. A merge not answered within ``answer_timeout`` (the owner died,
Redis restarted) is reported by :meth:`Answers.overdue`, and its session closed with
1013 (try again later): the client reconnects and sends it again, and its request
identity makes the second judgement exactly-once.
"""

from __future__ import annotations

import time

from sync.server._room import Room, Session
from sync.server.cluster.context import NodeContext
from sync.server.cluster.streams import AnswerKind, OutEntry
from sync.wire.errors import CloseCode
from sync.wire.protocol import reply_head

__all__ = ["Answers"]


class Answers:
    """The forwarded merges of one room on one hub, and their answers (see the module doc).

    Args:
        node: the hub's node (its id, the answer timeout, the inspector's hook, closing
            sessions).
        room: the room whose sessions the answers go to.
    """

    def __init__(self, node: NodeContext, room: Room) -> None:
        self.node = node
        self.room = room
        self.pending: dict[tuple[int, int], float] = {}
        """Forwarded merges not answered yet: (session id, request id) -> when forwarded
        (``time.monotonic()``); due ``answer_timeout`` later."""

    def deliver(self, entry: OutEntry) -> None:
        """Deliver the answers of ``entry`` (an ``out`` entry whose update was sent)."""
        me = self.node.hub_id
        for answer in entry.answers:
            mine = answer.hub == me
            session = self.room.sessions.get(answer.session) if mine else None
            if answer.kind is AnswerKind.REPLY:
                self._answered(answer.payload, session, mine)
            elif session is not None:
                self.node.close_session(
                    session, CloseCode.UNSUPPORTED_DATA, answer.payload.decode(errors="replace")
                )

    def _answered(self, frame: bytes, session: Session | None, mine: bool) -> None:
        """Deliver a merge's answer to its session (if here), and tell the inspector.

        Every hub sees every answer of the room: its feeds show them all, its metrics
        count those it answers (``mine``), so each merge is counted once.
        """
        seconds = None
        if session is not None:
            forwarded = self.pending.pop((session.id, _request_id(frame)), None)
            if forwarded is not None:
                seconds = time.monotonic() - forwarded
            self.room.reply(session, frame)
        told = self.node.merge_answered
        if told is not None:
            agent = (session.agent or session.label) if session is not None else None
            told(self.room, agent, frame, seconds, mine)

    def remember(self, session: Session, request_id: int) -> None:
        """Note a merge forwarded for ``session``; it is due within ``answer_timeout``.

        Its answer on ``out`` removes it; :meth:`overdue` reports it when none came.
        """
        self.pending[(session.id, request_id)] = time.monotonic()

    def forget_session(self, session: Session) -> None:
        """Drop every forwarded merge of ``session`` (it is leaving; no answer is awaited)."""
        for key in [k for k in self.pending if k[0] == session.id]:
            del self.pending[key]

    def overdue(self, now: float) -> list[Session]:
        """Sessions with a merge unanswered past its deadline (forgotten here)."""
        due = now - self.node.answer_timeout
        late = {sid for (sid, _), forwarded in self.pending.items() if forwarded <= due}
        sessions = [s for sid in late if (s := self.room.sessions.get(sid)) is not None]
        for sid in late:
            for key in [k for k in self.pending if k[0] == sid]:
                del self.pending[key]
        return sessions


def _request_id(frame: bytes) -> int:
    head = reply_head(frame)
    return -1 if head is None else head[0]
