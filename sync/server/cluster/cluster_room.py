"""One room as one hub of the cluster serves it: following ``out``, contending for ownership.

Every hub that has the room open follows it and contends for it:

- **following**: the hub's :class:`~sync.server.cluster.follower.Follower` reads
  ``crdt:<cluster>:{room}:out`` (with every other room's, in one ``XREAD BLOCK``) from where the
  replica was loaded and hands the entries of each read to
  :meth:`ClusterRoom.apply_entries`: their updates go to the hub's sessions at once and
  into the room's replica later, as one (:mod:`~sync.server.cluster.backlog`), then the
  answers addressed to this hub go to their sessions, after those updates. While this hub
  owns the room, its owner applies each entry it published the same way as soon as the
  publish returned (:meth:`ClusterRoom.published`), and the follower leaves the room out
  of its reads (:meth:`ClusterRoom.current`). When Redis fails (or restarts, losing the
  streams), the room loads the replica again from the durable store once Redis answers,
  so nothing published while it was away is missed.
- the **contender**: tries to take the room's lease, again just after the holder's
  lease would run out (Redis tells it how long that is; at most ``ttl / 3``); once it holds
  it, it loads a judge state and runs :class:`~sync.server.cluster.owner.RoomOwner` until
  the lease is lost or the store is fenced, then steps down and contends again. When the
  holder's lease shows a missed renewal, the contender loads the judge read-only while
  the lease runs out (:mod:`~sync.server.cluster.preload`) and, once it claimed the room,
  replays only what was committed since.

Merges this hub forwarded are remembered until their answer arrives, and the answers go
to their sessions (:class:`~sync.server.cluster.answers.Answers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from crdt_state import CrdtStateError
from sync.server._room import Room
from sync.server.cluster.answers import Answers
from sync.server.cluster.asking import ask_for_missing
from sync.server.cluster.backlog import Backlog
from sync.server.cluster.context import NodeContext
from sync.server.cluster.errors import ClusterError, ClusterUnavailable
from sync.server.cluster.inbox import InSlot
from sync.server.cluster.owner import RoomOwner, StepDown, newest_out
from sync.server.cluster.ownership import Ownership, try_acquire
from sync.server.cluster.preload import Preload
from sync.server.cluster.streamio import Entry, later
from sync.server.cluster.streams import OutEntry, StreamEntryError, decode_out

__all__ = ["ClusterRoom"]

log = logging.getLogger("crdt_state.cluster")

TRY_AGAIN_LATER = 1013
EXPIRY_SLACK = 0.005
"""Seconds a contender waits past the moment Redis said the holder's lease runs out."""


class ClusterRoom:
    """The cluster side of one open room on one hub (see the module doc)."""

    def __init__(
        self, node: NodeContext, room: Room, position: str, fence: int | None = None
    ) -> None:
        self.node = node
        self.room = room
        self.name = room.name
        self.position = position
        self.answers = Answers(node, room)
        """The merges this hub forwarded for the room's sessions, and their answers."""
        self.owner: RoomOwner | None = None
        self.applied = 0
        """``out`` entries applied to the replica (for tests and metrics)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.stale = False
        """Set when Redis lost its data (restarted): the replica is loaded again."""
        self.own_tail: str | None = None
        """While this hub owns the room: the id of the newest ``out`` entry that exists
        (the newest when the ownership began, then each entry its owner published); no
        other hub can publish after it while the lease holds. ``None`` otherwise."""
        self._ownership: Ownership | None = None
        self.fence_seen = fence
        """The highest fence of the ``out`` entries the replica holds (``None``: none yet;
        at first, that of the newest entry when the replica was loaded)."""
        self._resyncing = False
        self.preload = Preload(
            self.name, lambda: node.storage.preload(self.name, node.policies_for(self.name))
        )
        """The judge loaded while the holder's lease runs out, if any."""
        self.backlog = Backlog(room, self._failed)
        """Followed updates the sessions were sent and the replica gets later."""

    def start(self) -> None:
        """Start contending for the room's ownership, in a task that runs until :meth:`stop`.

        The hub that wins the lease judges the room's merges; a contender that loses
        it, or never gets it, keeps trying.
        """
        self._tasks = [
            asyncio.create_task(self._forever(self._contend), name=f"own {self.name}"),
        ]

    async def stop(self) -> None:
        """Stop the room's tasks and wait until they ended; their errors are not raised."""
        self._stopping = True
        self.preload.drop()
        self.backlog.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _forever(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` until the room stops, starting it again when it ends.

        An unexpected error, or a cancellation that is not the room's, is logged and
        ``job`` starts again.
        """
        while not self._stopping:
            try:
                await job()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._stopping or (task is not None and task.cancelling()):
                    raise
                # a cancellation that is not ours (a client library's timeout): go on
                log.warning(
                    "room %r: %s was interrupted, starting it again", self.name, job.__name__
                )
            except Exception:
                log.exception("room %r: %s failed, starting it again", self.name, job.__name__)
                await asyncio.sleep(0.1)

    # -- following out ------------------------------------------------------------------
    def apply_entries(self, entries: Sequence[Entry]) -> None:
        """Apply the ``out`` entries of one read (in stream order) to the room.

        Their updates go to the room's sessions at once and into the replica later, all
        as one (:class:`~sync.server.cluster.backlog.Backlog`: before the replica is next
        read, or when enough waits); the sessions get the same single update frame they
        got for changes made in one loop iteration. Then the answers of every entry are
        delivered in stream order, after the update that carries them. An entry that
        cannot be read is skipped (logged).
        """
        batch: list[OutEntry] = []
        for entry_id, fields in entries:
            self.position = entry_id
            try:
                batch.append(decode_out(fields))
            except StreamEntryError as exc:
                log.warning("room %r: skipping out-entry: %s", self.name, exc)
        for entry in batch:
            if entry.update:
                self.backlog.add(entry.update)
        for entry in batch:
            self._answer(entry)
        if batch:
            self._saw_fence(max(entry.fence for entry in batch))

    def current(self) -> bool:
        """True when the follower need not read the room's ``out`` stream.

        That is while this hub owns the room, its lease holds (no other hub can publish)
        and the replica has every entry published so far (every entry after
        :attr:`own_tail` is this owner's). Its owner then applies what it
        publishes itself (:meth:`published`).
        """
        tail = self.own_tail
        if tail is None or self._ownership is None or not self._ownership.valid():
            return False
        # ahead of the tail: the follower read an entry of this owner before the owner
        # heard back from its publish (whose report then applies nothing)
        return self.position == tail or later(self.position, tail)

    def published(self, entry_id: str, entry: OutEntry) -> None:
        """This hub's owner published ``entry`` as ``entry_id``: apply it to the replica.

        (Sent to the sessions at once, into the replica later, as in :meth:`apply_entries`.)

        Applied at once when the replica holds every entry before it (``position`` is the
        previous newest entry), so the follower need not read it back from ``out``;
        otherwise (the follower is still catching up, or the replica is reloading) the
        follower reads it with the rest.
        """
        if (
            self.own_tail is not None
            and self.position == self.own_tail
            and not self.stale
            and not self._resyncing
        ):
            self.position = entry_id
            if entry.update:
                self.backlog.add(entry.update)
            self._answer(entry)
            self._saw_fence(entry.fence)
        self.own_tail = entry_id

    @property
    def held_bytes(self) -> int:
        """Bytes of peers' updates this hub's owner judge holds (0 when it does not own)."""
        return self.owner.judge.held_bytes if self.owner is not None else 0

    def _saw_fence(self, fence: int) -> None:
        """The replica holds an entry published under ``fence``: a new owner asks again.

        A room's first owner needs nothing of the sessions (they sent their writes to it);
        a later one may lack what an earlier owner held and never committed (see
        :meth:`ask_sessions`).
        """
        if self.fence_seen is not None and fence > self.fence_seen:
            self.ask_sessions()
        if self.fence_seen is None or fence > self.fence_seen:
            self.fence_seen = fence

    def ask_sessions(self) -> None:
        """Ask this hub's writing sessions for what they hold beyond the room.

        When the room's judge may have lost writes it had not committed: the owner
        changed, or Redis lost its streams (see :mod:`~sync.server.cluster.asking`).
        """
        asked = ask_for_missing(self.room)
        if asked:
            log.info("room %r: asked %d session(s) for writes the room lacks", self.name, asked)

    def _failed(self) -> None:
        """Applying followed updates failed: load the replica again (the owner goes on)."""
        self.stale = True

    def _answer(self, entry: OutEntry) -> None:
        """Count ``entry`` applied and deliver its answers (its update is in the replica)."""
        self.applied += 1
        self.answers.deliver(entry)

    async def resync(self) -> None:
        """Wait until Redis answers, then load the replica again from the durable store."""
        self.stale = False
        self._resyncing = True
        try:
            await self._reload()
        finally:
            self._resyncing = False

    async def _reload(self) -> None:
        while not self._stopping:
            await asyncio.sleep(min(0.2, self.node.lease_ttl / 10))
            try:
                position, entry = await newest_out(self.node.redis, self.name, self.node.key_space)
            except ClusterUnavailable:
                continue
            try:
                fresh = await self.node.storage.open_replica(self.name)
            except (ClusterError, CrdtStateError, OSError) as exc:
                log.warning("room %r: cannot reload the replica yet (%s)", self.name, exc)
                continue
            update = fresh.get_update()
            fresh.close()
            self.room.state.apply_update(update, agent="cluster")
            self.position = position if self.node.storage.durable else "0-0"
            if entry is not None:  # asked below in any case
                self.fence_seen = max(entry.fence, self.fence_seen or 0)
            log.info("room %r: replica reloaded, following from %s", self.name, position)
            self.ask_sessions()  # writes not judged before Redis lost them
            return

    # -- ownership ---------------------------------------------------------------------------
    async def _contend(self) -> None:
        node = self.node
        loop = asyncio.get_running_loop()
        # when to try next: ttl/3 after this attempt was *asked* (a routine attempt waits
        # up to the hub's gathering window for the others: the window must not stretch
        # the period), or just after the holder's lease would expire
        next_at = 0.0
        routine = False  # the first attempt, and a timed one, go alone at once

        def busy(left: float) -> None:
            # try again just after the holder's lease would expire (at most ttl/3 from
            # the ask: a holder that renews pushes its expiry on), so a dead owner's room
            # is taken within a few milliseconds of its lease running out
            nonlocal next_at, routine
            if left > 0:  # 0: a key without expiry, not ours to hurry
                expiry = loop.time() + left + EXPIRY_SLACK
                # before the next routine attempt could be sent (it may wait up to the
                # gathering window): try alone at the expiry instead
                if expiry < next_at + node.renewals.window:
                    next_at, routine = expiry, False
            # a renewal missed: load the judge while the lease runs out; renewed (or
            # taken by another hub): drop what was loaded
            self.preload.saw(left, node.lease_ttl)

        while not self._stopping:
            asked = loop.time()
            next_at, this_routine, routine = asked + node.lease_ttl / 3, routine, True
            try:
                ownership = await try_acquire(
                    node.redis,
                    node.pool,
                    self.name,
                    owner=node.hub_id,
                    ttl=node.lease_ttl,
                    on_busy=busy,
                    renewals=node.renewals,
                    routine=this_routine,
                    space=node.key_space,
                )
            except ClusterError as exc:
                log.info("room %r: cannot contend (%s)", self.name, exc)
                ownership = None
            if ownership is None:
                await asyncio.sleep(max(0.0, next_at - loop.time()))
                continue
            routine = False
            try:
                await self._serve(ownership)
            except (ClusterError, CrdtStateError, OSError) as exc:
                log.warning("room %r: stepping down (%s: %s)", self.name, type(exc).__name__, exc)
            finally:
                self.owner = None
                await ownership.release()

    async def _serve(self, ownership: Any) -> None:
        node = self.node
        storage = node.storage
        # resume after the last published entry (final: the old owner's publish script
        # needs the lease we hold); read while the judge loads
        published = asyncio.ensure_future(newest_out(node.redis, self.name, node.key_space))
        try:
            preloaded = await self.preload.take()
            judge = await storage.open_judge(
                self.name, ownership, node.policies_for(self.name), preloaded
            )
        except BaseException:
            published.cancel()
            published.add_done_callback(_ignore)
            raise
        # the owner reads in through the hub's inbox and publishes through its outbox; this
        # connection of its own serves the rest (trimming in, and reads of a RoomOwner
        # given no inbox), sparing each call the pool's take-check-return (~30 us of CPU)
        redis = node.redis.client()
        slot: InSlot | None = None
        try:
            # when out is gone (Redis lost it), from the start of in: judging an entry
            # twice changes nothing
            tail, newest_entry = await published
            start = (newest_entry.last_in if newest_entry is not None else None) or "0-0"
            slot = node.inbox.register(self.name, start)
            owner = RoomOwner(
                redis,
                ownership,
                judge,
                start=start,
                max_document=node.max_document,
                on_committed=lambda position: storage.committed(judge, position),
                catch_up=judge.get_update(self.room.state.token),
                inbox=slot,
                publish=node.outbox.append_if_holder,
                on_published=self.published,
            )
            self.owner = owner
            # only this owner publishes after tail while the lease holds
            self._ownership, self.own_tail = ownership, tail
            log.info("room %r: owner (fence %d) from %s", self.name, ownership.fence.value, start)
            await owner.run(lambda: self._stopping)
        except StepDown:
            raise
        finally:
            self._ownership = self.own_tail = None
            if slot is not None:
                node.inbox.unregister(slot)
            storage.forget(judge)
            with contextlib.suppress(Exception):
                await redis.aclose()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(judge.close)


def _ignore(task: asyncio.Future[Any]) -> None:
    """Retrieve a dropped task's outcome (so that asyncio does not log it)."""
    if not task.cancelled():
        task.exception()


PoliciesFor = Callable[[str], Mapping[Any, object]]
