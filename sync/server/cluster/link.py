"""One Redis connection for one of the hub's busiest loops, without redis-py's client layer.

The outbox's pipelines and the ``in``/``out`` readers' ``XREAD`` calls are the cluster's
most frequent Redis calls (several per merge between them). Through redis-py's client
each pays for its command machinery: a ``Pipeline`` object, a command stack, the pool's
take-check-return, argument encoding, response callbacks turning every stream entry into a
dict. A 2-core machine measured ~220 µs of CPU for a one-``XADD`` pipeline that way and
~100-120 µs packed by hand on a connection of its own, ~50-90 µs less for an ``XREAD``
of 20 rooms. :class:`Link` keeps one redis-py connection (its handshake, authentication,
database and reply parser are redis-py's), and sends commands packed here, all of them
in one write, reading one reply each.

A link serves one task at a time (the outbox's sender, the inbox's reader, the
follower): calls must not overlap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

__all__ = ["Link", "bulk", "pack"]

_RETRIED: Final = (RedisConnectionError, OSError)
"""Failures after which a call is sent once more on a new connection, as the stream
client's own retry policy did (one immediate retry): a connection that died with a Redis
restart is replaced at once. ``TimeoutError`` (the callers' ``asyncio.timeout``) is an
``OSError`` too, but it cancels the call: nothing is retried after it."""


def pack(*args: bytes) -> bytes:
    """One command in Redis's protocol (RESP): an array of bulk strings.

    Every argument must be ``bytes`` (the callers' keys, ids and values are).
    """
    return b"*%d\r\n%b" % (len(args), b"".join(map(bulk, args)))


def bulk(arg: bytes) -> bytes:
    """``arg`` as one bulk string of a command (:func:`pack` joins them behind a header)."""
    return b"$%d\r\n%b\r\n" % (len(arg), arg)


class Link:
    """A connection of its own to ``redis``'s server (its URL, database, credentials).

    Args:
        redis: the client whose connection settings are used; the link neither uses its
            pool's connections nor closes the client.
    """

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._conn: AbstractConnection | None = None

    async def call(self, commands: Sequence[bytes]) -> list[Any]:
        """Send ``commands`` (each packed by :func:`pack`) in one write; a reply each.

        Replies come as redis-py's parser gives them (``bytes``, not decoded); an error
        reply is returned in its command's place as the ``ResponseError``, the others'
        replies are still read. A connection error is retried once on a new connection
        (the commands may then run twice: the callers send only what may, as redis-py's
        retry did). Whatever interrupts a call (an error, a cancellation, the caller's
        timeout) closes the connection: the next call opens a new one, never reading a
        reply meant for the one before.

        Raises:
            redis.exceptions.ConnectionError: Redis did not answer, twice.
            OSError: connecting failed, twice.
        """
        try:
            return await self._call(commands)
        except _RETRIED:
            await self._drop()
        return await self._call(commands)

    async def _call(self, commands: Sequence[bytes]) -> list[Any]:
        conn = self._conn
        if conn is None:
            pool = self.redis.connection_pool
            conn = self._conn = pool.make_connection()  # type: ignore[no-untyped-call,unused-ignore]
        try:
            await conn.send_packed_command(b"".join(commands), check_health=False)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # the connection is still in step
                    replies.append(exc)
            return replies
        except BaseException:
            await self._drop()
            raise

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection: nothing left to do
                await conn.disconnect(nowait=True)

    async def aclose(self) -> None:
        """Close the connection (a later call opens a new one)."""
        await self._drop()
