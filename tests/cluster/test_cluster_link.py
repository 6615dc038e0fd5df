"""The busiest loops' own Redis connection (``cluster.link``), on the machine's Redis.

A batch of packed commands gets one reply each in order, an error reply in its own
place; a connection Redis dropped is replaced within the call; a call interrupted by its
caller's timeout never hands its late reply to the next call.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from sync.server.cluster import room_key
from sync.server.cluster.clients import stream_client
from sync.server.cluster.link import Link, pack
from sync.server.cluster.streamio import read_rooms


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[Redis]:
    client = stream_client(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_batch_gets_each_reply_in_order_an_error_in_its_place(stream: Redis) -> None:
    key = room_key(f"link-{secrets.token_hex(4)}", "in").encode()
    link = Link(stream)
    try:
        replies = await link.call(
            [
                pack(b"XADD", key, b"*", b"e", b"one"),
                pack(b"HGET", key, b"field"),  # the wrong type: an error reply
                pack(b"XADD", key, b"*", b"e", b"two"),
                pack(b"XLEN", key),
            ]
        )
        assert isinstance(replies[0], bytes) and isinstance(replies[2], bytes)
        assert isinstance(replies[1], ResponseError)
        assert replies[3] == 2
        entries = await stream.xrange(key)
        assert entries is not None
        assert [(i, f) for i, f in entries] == [
            (replies[0], {b"e": b"one"}),
            (replies[2], {b"e": b"two"}),
        ]
    finally:
        await link.aclose()
        await stream.delete(key)


async def test_a_connection_redis_dropped_is_replaced_within_the_call(stream: Redis) -> None:
    link = Link(stream)
    try:
        (first,) = await link.call([pack(b"CLIENT", b"ID")])
        assert await stream.client_kill_filter(_id=first) == 1  # as a Redis restart would
        (second,) = await link.call([pack(b"CLIENT", b"ID")])
        assert isinstance(second, int) and second != first
    finally:
        await link.aclose()


async def test_an_interrupted_read_never_answers_the_next_call(stream: Redis) -> None:
    room = f"link-late-{secrets.token_hex(4)}"
    key = room_key(room, "out")
    link = Link(stream)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):  # as the follower bounds its reads
                await read_rooms(link, {room: "$"}, "out", count=10, block=2.0)
        added = await stream.xadd(key, {"e": b"late"})  # would answer the blocked read
        assert isinstance(added, bytes)  # a client without decode_responses
        (pong,) = await link.call([pack(b"PING")])
        assert pong in (b"PONG", "PONG")
        got = await read_rooms(link, {room: "0-0"}, "out", count=10, block=0.01)
        assert got == [(room, [(added.decode(), {b"e": b"late"})])]
    finally:
        await link.aclose()
        await stream.delete(key)
