"""The owner judges its own hub's writes without the ``in`` stream, in each session's order.

A write received by the hub that owns the room is handed to the owner loop directly
(``RoomOwner.submit``): no ``XADD``, no read back. Its session's earlier writes that went
through ``in`` are judged first (``RoomOwner.accepts``), it is answered only once committed
and published, and if the owner stops first the session is closed, so the client sends it
again (its request identity makes the second judgement answer like the first). Real Redis
and PostgreSQL throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any, cast

import psycopg
import pytest
from owned import owned_judge, published_after_claim
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from crdt_state.postgres import load_stored
from sync import ChangeKind, Hub, WireChange, connect
from sync.server.cluster import room_key
from sync.server.cluster.cluster_room import ClusterRoom
from sync.server.cluster.inbox import Inbox
from sync.server.cluster.owner import LocalWrite, RoomOwner, StepDown
from sync.server.cluster.streamio import read_all
from sync.server.cluster.streams import MERGE, AnswerKind, InEntry, decode_out, encode_in
from sync.wire import protocol as p


def _request(request_id: int, key: str) -> p.MergeRequest:
    change = WireChange(ChangeKind.SET, (key,), request_id)
    frame = p.encode_merge_request(request_id, "agent", b"\x00", [change], writer="w")
    request = p.decode_message(frame)
    assert isinstance(request, p.MergeRequest)
    return request


def _entry(session: int, request: p.MergeRequest) -> InEntry:
    return InEntry(MERGE, p.encode_message(request), "hub-a", session, "agent", "scope")


async def _until(check: Any, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def test_local_writes_follow_the_in_entries_taken_and_wait_for_the_commit(
    redis: Redis, pool: AsyncConnectionPool[AsyncConnection[Any]], postgres_dsn: str
) -> None:
    room = f"local-{secrets.token_hex(4)}"
    ownership, judge = await owned_judge(redis, pool, postgres_dsn, room)
    # redis types the fields as a dict, invariant: a dict[str, ...] is one only by a cast
    ids = [
        await redis.xadd(
            room_key(room, "in"),
            cast(dict[FieldT, EncodableT], encode_in(_entry(7, _request(n + 1, f"k{n}")))),
        )
        for n in range(2)
    ]
    last = ids[-1].decode() if isinstance(ids[-1], bytes) else str(ids[-1])
    inbox = Inbox(redis.client())
    slot = inbox.register(room, "0-0")
    owner = RoomOwner(redis, ownership, judge, start="0-0", max_document=1 << 20, inbox=slot)
    assert not owner.accepts(last)  # session 7's entries are not taken yet
    assert owner.accepts(None)  # a session that never went through in
    blocker = await psycopg.AsyncConnection.connect(postgres_dsn)
    tasks: list[asyncio.Task[None]] = []
    write = LocalWrite(_entry(8, _request(3, "k2")), _request(3, "k2"))
    try:
        async with blocker.transaction():
            await blocker.execute("SELECT 1 FROM crdt_rooms WHERE room = %s FOR UPDATE", (room,))
            tasks.append(asyncio.create_task(inbox.run()))
            tasks.append(asyncio.create_task(owner.run()))
            await _until(lambda: owner.taken == last)
            assert owner.accepts(last)  # taken: session 7 may go local now
            assert owner.submit(write)
            await asyncio.sleep(0.5)  # the batch under way waits for the row lock
            assert judge.get("k1") == 2 and judge.get("k2") is None  # the next batch's
            assert not write.done.done()  # not answered before PostgreSQL committed it
            assert await published_after_claim(redis, room) == []
        await asyncio.wait_for(write.done, 10)
        published = await read_all(redis, room_key(room, "out"))
        answers = [a for _, fields in published for a in decode_out(fields).answers]
        # the in entries first, then the local write; each answered once
        assert [(a.session, p.reply_head(a.payload)) for a in answers] == [
            (7, (1, p.MergeStatus.OK)),
            (7, (2, p.MergeStatus.OK)),
            (8, (3, p.MergeStatus.OK)),
        ]
        assert all(a.kind is AnswerKind.REPLY for a in answers)
        assert decode_out(published[-1][1]).last_in == last  # the position: in's, not local
        assert owner.local_judged == 1
        stored = await asyncio.to_thread(load_stored, postgres_dsn, room)
        assert stored is not None
        assert sorted(r.key.request_id for r in stored.requests) == [1, 2, 3]
    finally:
        for task in reversed(tasks):
            await _stop(task)
        await blocker.close()
        await asyncio.to_thread(judge.close)
        await ownership.release()


async def test_local_writes_fail_when_the_owner_stops_before_publishing(
    redis: Redis, pool: AsyncConnectionPool[AsyncConnection[Any]], postgres_dsn: str
) -> None:
    room = f"local-stop-{secrets.token_hex(4)}"
    ownership, judge = await owned_judge(redis, pool, postgres_dsn, room)
    inbox = Inbox(redis.client())
    slot = inbox.register(room, "0-0")
    owner = RoomOwner(redis, ownership, judge, start="0-0", max_document=1 << 20, inbox=slot)
    blocker = await psycopg.AsyncConnection.connect(postgres_dsn)
    task: asyncio.Task[None] | None = None
    judged = LocalWrite(_entry(8, _request(1, "a")), _request(1, "a"))
    queued = LocalWrite(_entry(8, _request(2, "b")), _request(2, "b"))
    try:
        async with blocker.transaction():
            await blocker.execute("SELECT 1 FROM crdt_rooms WHERE room = %s FOR UPDATE", (room,))
            task = asyncio.create_task(owner.run())
            assert owner.submit(judged)
            await _until(lambda: judge.get("a") == 1)  # judged, waiting for the commit
            assert owner.submit(queued)  # waits for the next batch
            await _stop(task)
            task = None
        for write in (judged, queued):  # both fail: their sessions must be closed
            assert write.done.done()
            assert isinstance(write.done.exception(), StepDown)
        assert not owner.accepts(None)  # a stopped owner takes nothing more
        late = LocalWrite(_entry(8, _request(3, "c")))
        assert not owner.submit(late) and not late.done.done()
        assert await published_after_claim(redis, room) == []  # nothing published
    finally:
        await _stop(task)
        await blocker.close()
        await asyncio.to_thread(judge.close)
        await ownership.release()


def _cluster_room(hub: Hub, room: str) -> ClusterRoom:
    node = hub._cluster
    assert node is not None
    return node.rooms[room]


@pytest.mark.slow
async def test_merges_from_both_hubs_with_drops_and_a_step_down_are_answered_once(
    hubs: tuple[Hub, Hub],
) -> None:
    """Merges from the owner's clients (local) and another hub's (through ``in``)
    interleave; the owner's hub drops its clients' connections twice, then its owner
    steps down with writes in flight. Every merge is acknowledged once per session and
    request, and every acknowledged merge is in both replicas and in PostgreSQL."""
    a, b = hubs
    room = f"local/mixed-{secrets.token_hex(3)}"
    answered: list[tuple[int, int]] = []
    async with connect(a.url(room), agent="on-a") as on_a:
        await on_a.acommit({"opened": True}, on_a.token)
        owned = _cluster_room(a, room)
        await _until(lambda: owned.owner is not None)
        reply = owned.room.reply

        def counted(session: Any, frame: bytes) -> None:
            head = p.reply_head(frame)
            if head is not None:
                answered.append((session.id, head[0]))
            reply(session, frame)

        owned.room.reply = counted  # type: ignore[method-assign]
        first_owner = owned.owner
        assert first_owner is not None
        async with connect(b.url(room), agent="on-b") as on_b:
            await _until(lambda: on_b.get("opened") is True)
            acked: list[str] = []

            async def write(client: Any, name: str, count: int) -> None:
                for i in range(count):
                    await client.acommit({(name, f"k{i}"): i}, client.token)
                    acked.append(f"{name}/k{i}")

            async def disturb() -> None:
                node = a._cluster
                assert node is not None
                for _ in range(2):
                    await asyncio.sleep(0.15)
                    for session in list(owned.room.sessions.values()):
                        node.close_session(session, 1013, "test drop")
                await asyncio.sleep(0.15)
                await owned.stop()  # A's owner steps down with A's writes in flight

            await asyncio.gather(write(on_a, "a", 60), write(on_b, "b", 60), disturb())
            await _until(lambda: on_a.get(("b", "k59")) == 59 and on_b.get(("a", "k59")) == 59)
            assert on_a.snapshot() == on_b.snapshot()
    assert first_owner.local_judged > 0  # A's own merges skipped the in stream
    assert len(acked) == 120
    assert len(answered) == len(set(answered))  # no session got an answer twice
    node = b._cluster
    assert node is not None
    stored = await asyncio.to_thread(load_stored, node.postgres_dsn or "", room)
    assert stored is not None
    paths = {path for change in stored.changes for path in change.paths}
    assert {(n, f"k{i}") for n in "ab" for i in range(60)} <= paths
