"""One ``in`` reader per hub, and the ``out`` script sent with the hub's other writes.

Real Redis. The inbox reads the ``in`` streams of several owned rooms in one ``XREAD``,
hands each room its own entries in order, leaves a replaced or full slot alone, and
fails its slots when Redis does not answer; the outbox runs the ``out`` script in its
pipeline and refuses to publish for a token that is not the lease holder's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from sync.server.cluster import ClusterUnavailable, redis_client, room_key
from sync.server.cluster.clients import stream_client
from sync.server.cluster.inbox import COUNT, Inbox
from sync.server.cluster.outbox import Outbox
from sync.server.cluster.streamio import read_all


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[Redis]:
    """A client as the hub's inbox has one: no socket timeout (a 1 s read timeout of a
    busy machine would fail the inbox's blocking reads as Redis not answering)."""
    client = stream_client(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def _wait(condition: object, what: str) -> None:
    assert callable(condition)
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)
    assert condition(), what


def _added(entry_id: bytes | str) -> bytes:
    """An ``XADD`` reply, as a client without ``decode_responses`` gets it."""
    assert isinstance(entry_id, bytes)
    return entry_id


async def test_one_read_serves_every_owned_room(stream: Redis) -> None:
    prefix = f"inbox-{secrets.token_hex(4)}"
    rooms = [f"{prefix}-{n}" for n in range(3)]
    ids = {
        room: [_added(await stream.xadd(room_key(room, "in"), {"n": str(n)})) for n in range(2)]
        for room in rooms
    }
    inbox = Inbox(stream, linger=1.0)  # after the first read, a pause: reads stays 1
    slots = {room: inbox.register(room, "0-0") for room in rooms}
    old = inbox.register(f"{prefix}-gone", "0-0")
    inbox.register(f"{prefix}-gone", "0-0")  # replaced: the old slot is read no more
    await stream.xadd(room_key(f"{prefix}-gone", "in"), {"n": "0"})
    task = asyncio.create_task(inbox.run())
    try:
        await _wait(lambda: all(slot.entries for slot in slots.values()), "every room read")
        assert inbox.reads == 1  # all three rooms in one XREAD
        for room, slot in slots.items():
            entries = await slot.take(0.1)
            assert [entry_id for entry_id, _ in entries] == [i.decode() for i in ids[room]]
            assert slot.position == ids[room][-1].decode()
        assert old.entries == []
        assert await slots[rooms[0]].take(0.01) == []  # nothing new: an empty batch
        later = _added(await stream.xadd(room_key(rooms[1], "in"), {"n": "2"}))
        assert [i for i, _ in await slots[rooms[1]].take(5)] == [later.decode()]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await stream.delete(*[room_key(r, "in") for r in [*rooms, f"{prefix}-gone"]])


async def test_a_full_slot_is_not_read_until_its_owner_takes(stream: Redis) -> None:
    room = f"inbox-full-{secrets.token_hex(4)}"
    key = room_key(room, "in")
    for n in range(COUNT + 5):
        await stream.xadd(key, {"n": str(n)})
    inbox = Inbox(stream, linger=0)
    slot = inbox.register(room, "0-0")
    task = asyncio.create_task(inbox.run())
    try:
        await _wait(slot.full, "a batch read")
        await asyncio.sleep(0.2)  # several rounds: the full slot is left out
        assert len(slot.entries) == COUNT
        assert len(await slot.take(0.1)) == COUNT
        await _wait(lambda: len(slot.entries) == 5, "the rest read once taken")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await stream.delete(key)


async def test_a_failed_read_fails_every_slot_once() -> None:
    nowhere = redis_client("redis://127.0.0.1:1", timeout=0.2)  # nothing listens there
    inbox = Inbox(nowhere)
    slot = inbox.register("inbox-down", "0-0")
    task = asyncio.create_task(inbox.run())
    try:
        with pytest.raises(ClusterUnavailable):
            await slot.take(5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await nowhere.aclose()


async def test_the_outbox_publishes_only_for_the_lease_holder(redis_url: str) -> None:
    client = redis_client(redis_url)
    outbox = Outbox(client)
    outbox.start()
    room = f"inbox-out-{secrets.token_hex(4)}"
    lease, out = room_key(room, "owner"), room_key(room, "out")
    try:
        await client.set(lease, "hub-a#1")
        first, refused = await asyncio.gather(
            outbox.append_if_holder(lease, "hub-a#1", out, {"u": b"x"}, maxlen=100),
            outbox.append_if_holder(lease, "hub-b#2", out, {"u": b"y"}, maxlen=100),
        )
        assert first is not None and refused is None
        assert outbox.batches == 1  # both in one pipeline
        assert [(i, dict(f)) for i, f in await read_all(client, out)] == [(first, {b"u": b"x"})]
    finally:
        await outbox.stop()
        await client.delete(lease, out)
        await client.aclose()


async def test_a_cancellation_swallowed_inside_a_round_still_ends_the_reader() -> None:
    """Python 3.11's ``wait_for`` (redis-py's socket timeouts) can swallow a cancellation
    that arrives as the call completes; the reader must end anyway, not loop for ever."""
    inbox = Inbox(redis_client("redis://127.0.0.1:1"))  # never used: the round is replaced
    rounds = 0

    async def swallowing_round() -> None:
        nonlocal rounds
        rounds += 1
        with contextlib.suppress(asyncio.CancelledError):  # as the lost cancellation
            await asyncio.sleep(0.01)

    inbox._round = swallowing_round  # type: ignore[method-assign]
    task = asyncio.create_task(inbox.run())
    await asyncio.sleep(0.05)
    task.cancel()
    async with asyncio.timeout(5):  # the old loop never ended
        with pytest.raises(asyncio.CancelledError):
            await task
    assert task.cancelled()
    assert rounds >= 1
