"""The owner loop of one room: judge the ``in`` stream in order, commit, then publish.

Runs only on the hub holding the room's :class:`~sync.server.cluster.Ownership`, with a
*judge* state: the room's :class:`~crdt_state.SharedState` loaded from PostgreSQL after
the fence was claimed, whose store checks that fence inside every write transaction.

One round:

1. take up to :data:`BATCH` entries of ``crdt:<cluster>:{room}:in`` after the last one judged: from
   the hub's :class:`~sync.server.cluster.inbox.Inbox` (one ``XREAD`` for every room the hub
   owns) when given an ``inbox`` slot, else by an ``XREAD`` of its own; then the writes
   of the hub's own sessions handed over since (:meth:`RoomOwner.submit`, see below);
2. judge them in that order with the single hub's code
   (:class:`~sync.server.cluster.judging.BatchJudge`): a plain update is applied
   (``apply_update``), a merge request is judged
   (:func:`~sync.server._merge.judge_merge_unwaited`); each change is made in memory at
   once, in that order, and handed to the store, then one wait covers the batch, so one
   PostgreSQL transaction can carry it;
3. once every change is durable, ``XADD`` one entry to ``crdt:<cluster>:{room}:out`` with the
   accepted changes (one Yjs update), the answers, and the last ``in`` id, in a script
   that adds it only while the room's lease still holds this owner's token (sent with the
   hub's other Redis writes in one pipeline when given a ``publish`` function). (Reading the
   next batch in the same script was tried and dropped: the shorter cycle made batches
   smaller, so Redis commands and PostgreSQL commits per merge rose; see
   docs/architecture.md.)

**Local writes.** A write received by the owner's own hub need not go through ``in``
(an ``XADD``, then reading it back): the hub hands it over with :meth:`RoomOwner.submit`
(a :class:`LocalWrite`, the merge request already decoded), and it is judged in the next
batch after that batch's ``in`` entries. Each session's writes stay in the order it sent
them: a session's write is handed over only once every earlier write it sent through
``in`` was taken into a batch (:meth:`RoomOwner.accepts`, by ``in`` id), and from then on
its writes follow each other in ``submit`` order. A local write has no ``in`` id: it
moves nothing in the stream position a next owner resumes from, so if this owner stops
before publishing its batch (the write not judged, or judged and committed but not
answered), it is not judged again by the next owner; its ``done`` fails instead, and the
hub closes the session (1013) and drops its later writes until it leaves, so the client
sends it again: a merge committed already is answered from its remembered request, an
update re-sent by the reconnecting client's sync. A committed change not published is
also in the next owner's catch-up entry.

Nothing is published for a batch whose storage failed (fenced, PostgreSQL gone): the
loop raises :class:`StepDown` and the hub drops the judge state. Because every change is
in PostgreSQL before it is published, and a new owner resumes after the last *published*
``in`` id, an entry can be judged twice (committed, then the owner died before
publishing), never lost: re-applying an update changes nothing, and a merge's request
identity makes its second judgement answer like the first without writing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Final, Protocol

from redis.asyncio import Redis

from crdt_state import SharedState
from sync.server.cluster.errors import LeaseLost, LossReason
from sync.server.cluster.inbox import InSlot
from sync.server.cluster.judging import BatchJudge, StepDown
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace
from sync.server.cluster.ownership import Ownership
from sync.server.cluster.streamio import (
    Entry,
    append_if_holder,
    later,
    newest,
    read_after,
    trim_before,
)
from sync.server.cluster.streams import InEntry, OutEntry, StreamEntryError, decode_out, encode_out
from sync.wire import protocol as p

__all__ = [
    "BATCH",
    "LocalWrite",
    "Publish",
    "RoomOwner",
    "StepDown",
    "newest_out",
]

log = logging.getLogger("crdt_state.cluster")

BATCH: Final = 256
"""Most ``in`` entries judged (and committed) together."""
OUT_MAXLEN: Final = 10_000
"""About how many entries ``out`` keeps (a follower further behind reloads)."""


class Publish(Protocol):
    """``publish(lease_key, token, out_key, fields, maxlen=...)``: the ``out`` script's call.

    Returns the new entry's id, ``None`` when the lease is not ``token``'s (see
    :func:`~sync.server.cluster.streamio.append_if_holder`).
    """

    def __call__(
        self,
        lease_key: str,
        token: str,
        key: str,
        fields: Mapping[str, bytes | str],
        *,
        maxlen: int,
    ) -> Awaitable[str | None]:
        """Run the script; awaiting gives the new id or ``None``."""
        ...


class LocalWrite:
    """A write of one of the owner's own hub's sessions, handed over without ``in``.

    Args:
        entry: the write, as it would have been appended to ``in``.
        request: the merge request ``entry.data`` encodes, already decoded (``None``:
            decode it, or the entry is an update).

    ``done`` is resolved once the batch that judged the write is published (its answer,
    if any, is then on its way to the session), and fails with :class:`StepDown` when
    the owner stopped first: the write may then be lost (not judged, or judged and
    committed but not answered), and the session must be closed so that its client
    sends it again (a merge's request identity makes a second judgement answer like
    the first).
    """

    __slots__ = ("done", "entry", "request")

    def __init__(self, entry: InEntry, request: p.MergeRequest | None = None) -> None:
        self.entry = entry
        self.request = request
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def fail(self, error: BaseException) -> None:
        """Fail ``done`` with ``error`` unless it is settled."""
        if not self.done.done():
            self.done.set_exception(error)
            self.done.exception()  # retrieved: a dropped session's write need not be awaited


async def newest_out(
    redis: Redis, room: str, space: KeySpace = DEFAULT_SPACE
) -> tuple[str, OutEntry | None]:
    """The id of ``room``'s newest ``out`` entry (``"0-0"``: none) and the entry.

    ``space``: the cluster's key space. The entry is ``None`` when ``out`` is empty or
    its newest entry is unreadable.
    """
    found = await newest(redis, space.key(room, "out"))
    if found is None:
        return "0-0", None
    try:
        return found[0], decode_out(found[1])
    except StreamEntryError:
        return found[0], None


class RoomOwner:
    """Judges ``room``'s ``in`` stream while ``ownership`` holds (see the module doc).

    Args:
        redis: the cluster's Redis.
        ownership: the room's ownership (lease and fence); its lease's key space names
            the room's ``in`` and ``out`` streams too.
        judge: the room's state, loaded after the fence was claimed, written under it.
        start: the ``in`` id after which to resume (``"0-0"``: from the start).
        max_document: the document size limit (bytes) merges are refused beyond.
        block: longest wait for new entries per ``XREAD`` (seconds); bounds how late a
            lost lease is noticed when the room is idle.
        on_committed: told the last ``in`` id of each batch once it is durable.
        catch_up: a Yjs update published before the first batch (in an entry published
            even when it is empty, which tells every hub the room has a new owner): what
            the judge holds beyond this hub's replica (changes an earlier owner committed
            but did not live to publish; a merge judged again then writes nothing, so
            without it the replicas would never get them).
        inbox: the room's slot in the hub's ``in`` reader, registered at ``start``
            (``None``: read ``in`` with an ``XREAD`` of its own).
        publish: how to run the ``out`` script (default: a call of its own on ``redis``).
        on_published: told each entry this owner published on ``out``, with its id, in
            publish order (the hub applies it to its own replica at once, without reading
            it back from ``out``).
    """

    def __init__(
        self,
        redis: Redis,
        ownership: Ownership,
        judge: SharedState,
        *,
        start: str,
        max_document: int,
        block: float = 0.2,
        on_committed: Callable[[str], None] = lambda position: None,
        catch_up: bytes = b"",
        inbox: InSlot | None = None,
        publish: Publish | None = None,
        on_published: Callable[[str, OutEntry], None] | None = None,
    ) -> None:
        self.redis = redis
        self.inbox = inbox
        self.publish: Publish = publish or partial(append_if_holder, redis)
        self.on_published = on_published
        self.ownership = ownership
        self.judge = judge
        self.position = start
        self.max_document = max_document
        self.on_committed = on_committed
        self.catch_up = catch_up
        self.block_ms = max(1, int(block * 1000))
        self.room = ownership.room
        self._in = ownership.space.key(self.room, "in")
        self._out = ownership.space.key(self.room, "out")
        self._judging = BatchJudge(judge, self.room, max_document)
        self.judged = 0
        """Entries judged so far (for tests and metrics)."""
        self.taken = start
        """The id of the newest ``in`` entry taken into a batch (judged, or being judged)."""
        self.local_judged = 0
        """Local writes judged so far (for tests and metrics)."""
        self._local: list[LocalWrite] = []
        self._unpublished: list[LocalWrite] = []
        self._stopped = False

    def accepts(self, after: str | None) -> bool:
        """True when a write may be handed over with :meth:`submit` now.

        ``after`` is the ``in`` id of the newest write its session appended to ``in``
        (``None``: none). A session's writes must be judged in the order it sent them,
        so a write goes to the owner directly only once every earlier write of its
        session that went through ``in`` was taken into a batch; later ones then
        follow it in :meth:`submit`'s order. Also false once the owner stopped, or when
        it reads ``in`` by itself (no inbox slot to wake).
        """
        if self._stopped or self.inbox is None:
            return False
        return after is None or not later(after, self.taken)

    def submit(self, write: LocalWrite) -> bool:
        """Judge ``write`` in a next batch, after the ``in`` entries taken with it.

        A batch takes up to :data:`BATCH` local writes, oldest first; the rest wait for
        the next one (``in`` entries taken then come first: they are other sessions').

        Returns ``False`` (nothing done) when the owner no longer takes writes. The
        caller must have checked :meth:`accepts` for the write's session.
        """
        if self._stopped or self.inbox is None:
            return False
        self._local.append(write)
        self.inbox.ready.set()
        return True

    async def run(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Judge until ``stop()`` is true; raises ``LeaseLost``, ``Fenced`` or :class:`StepDown`.

        Raises:
            ClusterUnavailable: Redis did not answer (the caller steps down and retries).
        """
        unsubscribe = self._judging.subscribe()
        try:
            # published even when empty: the hubs learn of the new owner (its fence) and
            # ask their sessions for writes an earlier owner held uncommitted
            await self._publish(OutEntry(self.catch_up, self.position, self.fence))
            while not stop():
                self.ownership.check()
                entries = await self._read()
                local, self._local = self._local[:BATCH], self._local[BATCH:]
                if not entries and not local:
                    continue
                self._unpublished = local
                handed = ((write.entry, write.request) for write in local)
                out = await self._judging.batch(entries, handed, self.position, self.fence)
                self.on_committed(out.last_in)
                await self._publish(out)
                self._unpublished = []
                for write in local:
                    if not write.done.done():
                        write.done.set_result(None)
                self.position = out.last_in
                count = len(entries) + len(local)
                if not self.judged:
                    log.info("room %r: first batch published (%d entries)", self.room, count)
                self.judged += count
                self.local_judged += len(local)
                if entries and self.judged % (BATCH * 4) < count:
                    await self._trim()
        finally:
            unsubscribe()
            self._stopped = True
            abandoned = [*self._unpublished, *self._local]
            self._unpublished, self._local = [], []
            if abandoned:
                error = StepDown(f"room {self.room!r}: the owner stopped before answering")
                for write in abandoned:
                    write.fail(error)

    async def _read(self) -> list[Entry]:
        """The next entries of ``in`` (up to :data:`BATCH`; none after a while without).

        Does not wait when local writes are waiting (they are judged after these).
        """
        if self.inbox is not None:
            if self._local:
                entries = self.inbox.take_now()
            else:
                entries = await self.inbox.take(self.block_ms / 1000)
            if entries:
                self.taken = entries[-1][0]
            return entries
        return await read_after(
            self.redis, self._in, self.position, count=BATCH, block_ms=self.block_ms
        )

    async def _publish(self, out: OutEntry) -> None:
        """Append ``out`` while the lease is this owner's; ``LeaseLost`` otherwise."""
        self.ownership.check()
        published = await self.publish(
            self.ownership.lease.key,
            self.ownership.token,
            self._out,
            encode_out(out),
            maxlen=OUT_MAXLEN,
        )
        if published is None:  # the lease is gone: publish nothing, step down
            raise LeaseLost(self.room, self.ownership.token, LossReason.TAKEN)
        if self.on_published is not None:
            self.on_published(published, out)

    @property
    def fence(self) -> int:
        """The fence this owner judges under (the room's while it holds the lease)."""
        return self.ownership.fence.value

    async def _trim(self) -> None:
        """Drop the ``in`` entries judged and published (keeps the last one)."""
        await trim_before(self.redis, self._in, self.position)
