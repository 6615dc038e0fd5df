"""Judging one batch of a room's writes: each in order at once, then one wait for them all.

The owner's judge state (:class:`~crdt_state.SharedState`, loaded from PostgreSQL under
the room's fence) takes every write of a batch in stream order with the single hub's
code, making each change in memory and handing it to its store; one wait then covers the
batch, so one PostgreSQL transaction can carry it. The result is the ``out`` entry to
publish: the batch's changes as one Yjs update and every answer. When the judge's
storage fails (fenced, PostgreSQL gone), nothing is published: :class:`StepDown`.

A batch's judging hands the event loop back every :data:`SLICE` seconds of it: a batch
of 256 writes that are each slow to judge (an offline agent's queued merges, each
building on every one before it, cost ~5 ms each at a few thousand) would otherwise
hold the loop for seconds, and the lease renewals and every other room of the hub wait
behind it (an owner lost its lease so, and its sessions, found trying a failover with
~3,000 queued merges). The writes are still judged in order, by this one task.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from pycrdt import merge_updates

from crdt_state import CrdtStateError, SharedState, StateUpdate
from sync.server._merge import judge_merge_unwaited
from sync.server.cluster.errors import ClusterError
from sync.server.cluster.streamio import Entry
from sync.server.cluster.streams import (
    MERGE,
    Answer,
    AnswerKind,
    InEntry,
    OutEntry,
    StreamEntryError,
    decode_in,
)
from sync.wire import protocol as p
from sync.wire.errors import ProtocolError

__all__ = ["SLICE", "STORAGE_CODES", "BatchJudge", "StepDown"]

log = logging.getLogger("crdt_state.cluster")

STORAGE_CODES: Final = frozenset({"storage", "state_closed", "write_failed", "fenced"})
"""Merge-result error codes that mean the judge's storage failed, not the merge."""
SLICE: Final = 0.05
"""Longest a batch's judging holds the event loop before handing it back (seconds)."""


class StepDown(ClusterError):
    """The owner must stop: its storage failed (fenced, PostgreSQL unreachable)."""

    code = "step_down"


class BatchJudge:
    """Judges batches of ``room``'s writes with ``judge`` (see the module doc).

    Args:
        judge: the room's state, loaded after the fence was claimed, written under it.
        room: the room's name (in logs and errors).
        max_document: the document size limit (bytes) merges are refused beyond.
    """

    def __init__(self, judge: SharedState, room: str, max_document: int) -> None:
        self.judge = judge
        self.room = room
        self.max_document = max_document
        self._changes: list[bytes] = []
        self._size = len(judge.get_update())

    def subscribe(self) -> Callable[[], None]:
        """Start collecting the judge's changes; returns the call that stops it."""
        return self.judge.subscribe(self._on_change)

    def _on_change(self, change: StateUpdate) -> None:
        self._changes.append(change.update)
        self._size += len(change.update)

    def _too_large(self, extra: int) -> bool:
        if self._size + extra <= self.max_document:
            return False
        self._size = len(self.judge.get_update())
        return self._size + extra > self.max_document

    async def batch(
        self,
        entries: list[Entry],
        local: Iterable[tuple[InEntry, p.MergeRequest | None]],
        position: str,
        fence: int,
    ) -> OutEntry:
        """Judge ``entries``, then ``local``, in order; the out entry to publish once durable.

        Every entry is judged at once, in stream order, without waiting for the store
        (each change is made in memory and handed to it); then one wait covers the
        whole batch, so one PostgreSQL transaction can carry it and the loop pays one
        wake-up per batch, not one per merge. Nothing is answered before that wait.
        The local writes (this hub's sessions' writes handed over by
        :meth:`~sync.server.cluster.owner.RoomOwner.submit`: each entry with its merge
        request already decoded, if any) come after the batch's ``in`` entries; the
        entry's last ``in`` id is that of ``entries`` (``position`` when there are
        none), its fence ``fence``.
        """
        self._changes.clear()
        answers: list[Answer] = []
        handed_back = time.monotonic()
        for entry, request in itertools.chain(self._decoded(entries), local):
            self._judge_into(answers, entry, request)
            if time.monotonic() - handed_back > SLICE:
                await asyncio.sleep(0)  # the loop's other tasks run (see the module doc)
                handed_back = time.monotonic()
        await self._durable()
        updates = self._changes[:]
        self._changes.clear()
        if len(updates) == 1:
            update = updates[0]
        elif updates:
            update = bytes(merge_updates(*updates))
        else:
            update = b""
        last_in = entries[-1][0] if entries else position
        return OutEntry(update, last_in, fence, tuple(answers))

    def _decoded(self, entries: list[Entry]) -> Iterator[tuple[InEntry, None]]:
        """The writes of ``in`` entries, in order (one that cannot be read is logged, skipped)."""
        for entry_id, fields in entries:
            try:
                yield decode_in(fields), None
            except StreamEntryError as exc:
                log.warning("room %r: skipping in-entry %r: %s", self.room, entry_id, exc)

    def _judge_into(
        self, answers: list[Answer], entry: InEntry, request: p.MergeRequest | None
    ) -> None:
        try:
            answer = self._judge_one(entry, request)
        except StepDown:
            raise
        except Exception as exc:  # the judge's storage failed: nothing is published
            raise StepDown(f"room {self.room!r}: judging failed: {exc}") from exc
        if answer is not None:
            answers.append(answer)

    async def _durable(self) -> None:
        """Wait until every change judged so far is durable; :class:`StepDown` if never."""
        try:
            await self.judge.awhen_durable()
        except Exception as exc:  # fenced, PostgreSQL gone: nothing is published
            raise StepDown(f"room {self.room!r}: storage failed: {exc}") from exc

    def _judge_one(self, entry: InEntry, request: p.MergeRequest | None = None) -> Answer | None:
        if entry.kind == MERGE:
            return self._judge_merge(entry, request)
        try:
            self.judge.apply_update(entry.data, agent=entry.agent, wait=False)
        except CrdtStateError as exc:
            if exc.code in STORAGE_CODES:
                raise
            reason = f"update refused: {exc.code}".encode()
            return Answer(entry.hub, entry.session, AnswerKind.CLOSE, reason)
        return None

    def _judge_merge(self, entry: InEntry, request: p.MergeRequest | None) -> Answer | None:
        if request is None:
            try:
                message = p.decode_message(entry.data)
            except ProtocolError as exc:
                log.warning("room %r: undecodable merge in the stream: %s", self.room, exc)
                return None
            if not isinstance(message, p.MergeRequest):
                return None
            request = message
        frame = judge_merge_unwaited(
            self.judge,
            request,
            agent=entry.agent,
            scope=entry.scope,
            too_large=self._too_large,
        )
        head = p.reply_head(frame)
        if head is None or head[1] is p.MergeStatus.ERROR:  # rare: read the error's code
            reply = p.decode_message(frame)
            error = reply.error if isinstance(reply, p.MergeReply) else None
            if error is not None and error.code in STORAGE_CODES:
                raise StepDown(f"room {self.room!r}: storage failed: {error.message}")
        return Answer(entry.hub, entry.session, AnswerKind.REPLY, frame)
