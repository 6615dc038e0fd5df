"""A cluster hub's readiness: Redis and PostgreSQL answer (``/readyz``).

A cluster hub serves its rooms from Redis (the log) and PostgreSQL (the storage): while
either does not answer, clients opening a room are closed with 1013, so the hub is not
ready. :func:`readiness_checks` gives the hub's inspector two checks, named ``redis`` and
``postgres`` in ``/readyz``'s ``problems``: a ``PING`` on the node's Redis client and a
``SELECT 1`` on a connection of its pool, each awaited for at most
:data:`READY_TIMEOUT` (and never cancelled: see :class:`_Probe`). A
cluster hub's ``--db`` directory is not used, so it is not checked (the hub's ``db`` is
``None``). Each answer is ``None`` when fine, else what is wrong, naming the server
without its password.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from crdt_state.postgres import safe_dsn
from sync.server.cluster.clients import safe_redis_url
from sync.server.observe.pages import ReadinessCheck

if TYPE_CHECKING:
    from sync.server.cluster.node import ClusterNode

__all__ = ["READY_TIMEOUT", "readiness_checks"]

READY_TIMEOUT: Final = 1.0
"""Seconds a check waits for its server's answer before it reports it as not answering."""


class _Probe:
    """A readiness check: one ``job`` at a time, awaited for at most :data:`READY_TIMEOUT`.

    A job still running then is not cancelled: cancelling a psycopg query sends the server
    a cancel request, which a server that does not answer holds for seconds more (a
    ``/readyz`` then took over 10 s). The next check waits on the same job, so a server
    that stopped answering ties up one call at most.
    """

    def __init__(self, name: str, what: str, job: Callable[[], Awaitable[None]]) -> None:
        self.__name__ = name  # the problem's key in /readyz
        self._what = what
        self._job = job
        self._task: asyncio.Future[None] | None = None
        self._since = 0.0

    async def __call__(self) -> str | None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task, self._since = asyncio.ensure_future(self._job()), loop.time()
            self._task.add_done_callback(_retrieve)
        done, _ = await asyncio.wait({self._task}, timeout=READY_TIMEOUT)
        if not done:
            return f"{self._what} did not answer within {loop.time() - self._since:.1f} s"
        error = self._task.exception()
        if error is None:
            return None
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return f"{self._what} does not answer: {reason}"


def _retrieve(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


def readiness_checks(node: ClusterNode) -> list[ReadinessCheck]:
    """The ``redis`` and ``postgres`` readiness checks of ``node`` (once it is started).

    Without a PostgreSQL DSN (a node given another storage) only Redis is checked.
    """

    async def ping() -> None:
        await node.redis.ping()

    async def select() -> None:
        async with node.pool.connection() as conn:
            await conn.execute("SELECT 1")

    checks: list[ReadinessCheck] = [
        _Probe("redis", f"redis at {safe_redis_url(node.redis_url)} (PING)", ping)
    ]
    if node.postgres_dsn is not None:
        shown = safe_dsn(node.postgres_dsn)
        checks.append(_Probe("postgres", f"postgres at {shown} (SELECT 1)", select))
    return checks
