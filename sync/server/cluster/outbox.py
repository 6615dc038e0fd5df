"""One hub's writes to Redis, sent in pipelined batches: one round trip for many.

Every session of a hub forwards its writes (``XADD`` to a room's ``in`` stream) and its
awareness (``PUBLISH``), and every room the hub owns publishes its judged batches
(:meth:`Outbox.append_if_holder`, the ``out`` script); sent one by one, each costs a
Redis round trip and, when many are in flight at once, a pooled connection each.
:class:`Outbox` queues them instead and one task sends whatever is queued as one
non-transactional pipeline; while a batch is on its way the next one fills up, so the
batches grow with the load and the round trips per write shrink. Each command is packed
when it is queued and a batch goes out in one write on the outbox's own connection
(:class:`~sync.server.cluster.link.Link`): a one-command batch cost ~220 µs of CPU
through redis-py's ``Pipeline``, ~100-120 µs so.

Order: the commands of a batch are sent in the order they were queued, and one batch is
sent only after the previous one was answered, so one session's writes reach the ``in``
stream in the order it sent them (an update before the merge that follows it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Final

from redis.asyncio import Redis

from sync.server.cluster.clients import CALL_TIMEOUT
from sync.server.cluster.errors import ClusterUnavailable
from sync.server.cluster.lease import UNAVAILABLE
from sync.server.cluster.link import Link, pack
from sync.server.cluster.streamio import APPEND_IF_HOLDER, end_if_cancelled, text_id

__all__ = ["MAX_BATCH", "Outbox"]

MAX_BATCH: Final = 512
"""Most commands sent in one pipeline."""

_Command = tuple[bytes, "asyncio.Future[Any] | None"]
"""A command packed for Redis, and the future its reply goes to (``None``: unawaited)."""
_SCRIPT: Final = APPEND_IF_HOLDER.encode()
"""The ``out`` script's text as bytes: redis-py packs a ``str`` argument several times
slower than bytes (see :func:`~sync.server.cluster.streamio.read_rooms`)."""


def _raw(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


class Outbox:
    """Queues ``XADD`` and ``PUBLISH`` commands and sends them in pipelined batches.

    Args:
        redis: the cluster's Redis: the outbox sends on a connection of its own made with
            its settings, closed by :meth:`stop`.
        timeout: longest wait for one pipeline's answers (seconds); then its writes fail
            with ``ClusterUnavailable`` (the client need not have a timeout of its own).
    """

    def __init__(self, redis: Redis, *, timeout: float = CALL_TIMEOUT) -> None:
        self.redis = redis
        self.link = Link(redis)
        self.timeout = timeout
        self._queue: list[_Command] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        """Pipelines sent so far (for tests and metrics)."""

    def start(self) -> None:
        """Start the sending task (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cluster outbox")

    async def stop(self) -> None:
        """Stop sending; the writes still queued fail with ``ClusterUnavailable``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self._fail(self._take_all(), ClusterUnavailable("redis", "the hub is stopping"))
        await self.link.aclose()

    async def append(self, key: str | bytes, fields: Mapping[str, bytes | str]) -> str:
        """``XADD`` ``fields`` to ``key``; the new entry's id, once Redis stored it.

        Raises:
            ClusterUnavailable: Redis did not answer (the entry may or may not be stored).
        """
        args = [b"XADD", _raw(key), b"*"]
        for name, value in fields.items():
            args += (name.encode(), _raw(value))
        return await self.append_packed(pack(*args))

    async def append_packed(self, command: bytes) -> str:
        """Send ``command``, an ``XADD`` packed for Redis; the new entry's id, once stored.

        Raises:
            ClusterUnavailable: Redis did not answer (the entry may or may not be stored).
        """
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((command, done))
        self._ready.set()
        return text_id(await done)

    async def append_if_holder(
        self,
        lease_key: str,
        token: str,
        key: str,
        fields: Mapping[str, bytes | str],
        *,
        maxlen: int,
    ) -> str | None:
        """As :func:`~sync.server.cluster.streamio.append_if_holder`, with the next batch.

        Returns the new id, or ``None`` when the lease is not ``token``'s.

        Raises:
            ClusterUnavailable: Redis did not answer (the entry may or may not be stored).
        """
        # the script's text: Redis caches it by its digest (an EVALSHA through redis-py's
        # Script would first send SCRIPT EXISTS)
        args = [b"EVAL", _SCRIPT, b"2", lease_key.encode(), key.encode(), token.encode()]
        args.append(b"%d" % maxlen)
        for name, value in fields.items():
            args += (name.encode(), _raw(value))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((pack(*args), done))
        self._ready.set()
        added = await done
        if added is None:
            return None
        return added.decode() if isinstance(added, bytes) else str(added)

    def publish(self, channel: str, message: bytes) -> None:
        """``PUBLISH`` ``message`` on ``channel`` with the next batch (lost if Redis is down)."""
        self._queue.append((pack(b"PUBLISH", channel.encode(), message), None))
        self._ready.set()

    def _take_all(self) -> list[_Command]:
        batch, self._queue = self._queue, []
        return batch

    def _take(self) -> list[_Command]:
        if len(self._queue) <= MAX_BATCH:
            return self._take_all()
        batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
        return batch

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                batch = self._take()
                await self._send(batch)
                end_if_cancelled()

    async def _send(self, batch: list[_Command]) -> None:
        try:
            async with asyncio.timeout(self.timeout):  # the client has none (stream_client)
                results = await self.link.call([command for command, _ in batch])
        except UNAVAILABLE as exc:  # TimeoutError included
            self._fail(batch, ClusterUnavailable("redis", f"redis did not answer: {exc}"))
            return
        except Exception as exc:  # a bug or an unexpected reply: fail the batch, go on
            self._fail(batch, ClusterUnavailable("redis", f"redis refused a batch: {exc}"))
            return
        finally:
            self.batches += 1
        for (_, done), result in zip(batch, results, strict=True):
            if done is None or done.done():
                continue
            if isinstance(result, Exception):
                done.set_exception(ClusterUnavailable("redis", f"redis refused: {result}"))
            else:
                done.set_result(result)

    @staticmethod
    def _fail(batch: list[_Command], error: ClusterUnavailable) -> None:
        for _, done in batch:
            if done is not None and not done.done():
                done.set_exception(error)
