"""A hub's shared Redis round trips: the pipelined outbox and the one-read follower."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Mapping
from typing import Any

import pytest
from redis.asyncio import Redis

from sync.server.cluster import ClusterUnavailable, redis_client, room_key
from sync.server.cluster.clients import CALL_TIMEOUT, stream_client
from sync.server.cluster.follower import BLOCK, Follower
from sync.server.cluster.link import Link
from sync.server.cluster.outbox import Outbox
from sync.server.cluster.streamio import read_all


async def test_outbox_keeps_order_and_shares_round_trips(redis: Redis) -> None:
    key = room_key(f"outbox-{secrets.token_hex(4)}", "in")
    outbox = Outbox(redis)
    outbox.start()
    try:
        await asyncio.gather(*(outbox.append(key, {"n": str(i)}) for i in range(300)))
    finally:
        await outbox.stop()
    entries = await read_all(redis, key)
    assert [int(fields[b"n"]) for _, fields in entries] == list(range(300))
    assert 1 <= outbox.batches < 30  # many appends per round trip, not one each


async def test_outbox_fails_its_writes_when_redis_does_not_answer() -> None:
    client = redis_client("redis://127.0.0.1:1/0", timeout=0.5)  # nothing listens there
    outbox = Outbox(client)
    outbox.start()
    try:
        with pytest.raises(ClusterUnavailable):
            await outbox.append(room_key("nowhere", "in"), {"n": "1"})
        outbox.publish(room_key("nowhere", "awareness"), b"lost")  # dropped, never raises
        with pytest.raises(ClusterUnavailable):
            await outbox.append(room_key("nowhere", "in"), {"n": "2"})
    finally:
        await outbox.stop()
        await client.aclose()


class SilentServer:
    """A server that accepts connections and reads, but never answers (a hung Redis)."""

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def __aexit__(self, *_: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass
        writer.close()


async def test_calls_without_a_socket_timeout_still_fail_when_redis_hangs() -> None:
    """The outbox's and the follower's client has no socket timeout (stream_client): their
    own bounds fail the writes, and send every followed room to reload, as a timeout did."""
    async with SilentServer() as url:
        client = stream_client(url, timeout=0.5)
        outbox = Outbox(client, timeout=0.3)
        outbox.start()
        try:
            started = time.monotonic()
            with pytest.raises(ClusterUnavailable):
                await outbox.append(room_key("hung", "in"), {"n": "1"})
            assert time.monotonic() - started < 2
            room = FakeRoom("hung")
            follower = Follower(client.client(), {"hung": room})  # type: ignore[dict-item]
            reloaded = asyncio.Event()

            async def resync() -> None:
                reloaded.set()

            room.resync = resync  # type: ignore[method-assign]
            task = asyncio.create_task(follower.run())
            try:
                await asyncio.wait_for(reloaded.wait(), BLOCK + CALL_TIMEOUT + 2)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            await outbox.stop()
            await client.aclose()


class FakeRoom:
    """What the follower needs of a ClusterRoom: a position, a stale flag, the entries."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.position = "0-0"
        self.stale = False
        self.seen: list[bytes] = []
        self.resyncs = 0

    def current(self) -> bool:
        return False

    def apply_entry(self, entry_id: str, fields: Mapping[bytes | str, bytes | str]) -> None:
        self.position = entry_id
        value = fields[b"u"]
        assert isinstance(value, bytes)
        if value == b"boom":
            raise RuntimeError("cannot apply")
        self.seen.append(value)

    def apply_entries(self, entries: list[tuple[str, Mapping[bytes | str, bytes | str]]]) -> None:
        for entry_id, fields in entries:
            self.apply_entry(entry_id, fields)

    async def resync(self) -> None:
        self.stale = False
        self.resyncs += 1


async def test_follower_reads_every_room_in_one_call_and_resyncs_a_failing_one(
    redis: Redis,
) -> None:
    tag = secrets.token_hex(4)
    names = [f"follow-{tag}-{i}" for i in range(5)]
    rooms = {name: FakeRoom(name) for name in names}
    for name in names:
        for i in range(3):
            await redis.xadd(room_key(name, "out"), {"u": f"{name}/{i}".encode()})
    await redis.xadd(room_key(names[0], "out"), {"u": b"boom"})
    follower = Follower(redis, rooms)  # type: ignore[arg-type]
    task = asyncio.create_task(follower.run())
    try:
        for _ in range(100):
            await asyncio.sleep(0.02)
            if all(len(r.seen) == 3 for r in rooms.values()) and rooms[names[0]].resyncs:
                break
        reads_after_catch_up = follower.reads
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for name, room in rooms.items():
        assert room.seen == [f"{name}/{i}".encode() for i in range(3)]
    assert rooms[names[0]].resyncs >= 1  # applying an entry failed: the room reloads
    assert all(rooms[n].resyncs == 0 for n in names[1:])
    assert reads_after_catch_up <= 3  # the five rooms' entries came in one read


async def test_follower_leaves_out_current_rooms_and_skips_what_their_owner_applied(
    redis: Redis,
) -> None:
    """A room its hub owns (``current()``) is not read; entries that the room's owner
    applied while a read was on its way (its position moved past them) are not applied
    again: their answers would reach the sessions twice."""
    tag = secrets.token_hex(4)
    owned, followed = FakeRoom(f"owned-{tag}"), FakeRoom(f"followed-{tag}")
    owned.current = lambda: True  # type: ignore[method-assign]
    await redis.xadd(room_key(owned.name, "out"), {"u": b"never read"})
    first = await redis.xadd(room_key(followed.name, "out"), {"u": b"applied by its owner"})
    assert isinstance(first, bytes)  # a client without decode_responses
    await redis.xadd(room_key(followed.name, "out"), {"u": b"second"})
    import sync.server.cluster.follower as follower_module
    from sync.server.cluster import streamio

    read = streamio.read_rooms  # the follower's (follower_module does not re-export it)
    seen: list[object] = []

    async def read_rooms(link: Link, positions: dict[str, str], part: str, **options: Any) -> Any:
        seen.append((sorted(positions), part))
        got = await read(link, positions, part, **options)
        if got and followed.position == "0-0":  # the owner applied the first entry meanwhile
            followed.position = first.decode()
        return got

    follower = Follower(redis, {owned.name: owned, followed.name: followed})  # type: ignore[dict-item]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(follower_module, "read_rooms", read_rooms)
        task = asyncio.create_task(follower.run())
        try:
            for _ in range(100):
                await asyncio.sleep(0.02)
                if followed.seen:
                    break
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert followed.seen == [b"second"]
    assert owned.seen == []
    assert seen and all(read == ([followed.name], "out") for read in seen)
