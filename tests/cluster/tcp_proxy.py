"""A tiny TCP proxy the tests put in front of a server and pause: a blackholed server.

``with TcpProxy(target_port) as proxy:`` forwards 127.0.0.1:``proxy.port`` to
127.0.0.1:``target_port`` from an event loop on a thread of its own. :meth:`pause` stops
forwarding in both directions without closing anything (and new connections are
accepted, then left unanswered): to the client the server has stopped answering, as
behind a dead network link, which no one but root can otherwise arrange. :meth:`resume`
forwards again. Leaving the ``with`` closes every connection and stops the thread
(bounded waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Self

from cluster_servers import free_port

__all__ = ["TcpProxy"]

_CHUNK = 65536


class TcpProxy:
    """Forward a free loopback port to ``target_port``; :meth:`pause` blackholes it."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # -- control (from the test's thread) ------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self._call(self._open())

    def pause(self) -> None:
        """Stop forwarding: bytes stay unread on both sides, nothing is closed."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        """Forward again (nothing once stopped)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._flowing.set)

    def stop(self) -> None:
        """Close every connection (new ones are then refused) and end the thread."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def _call(self, job: object) -> None:
        asyncio.run_coroutine_threadsafe(job, self._loop).result(timeout=5)  # type: ignore[arg-type]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the proxy (on its own loop) -------------------------------------------------------
    async def _open(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=2) if tasks else None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()  # a connection made while paused is left hanging
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._writers.add(up_writer)
            await asyncio.gather(
                self._pump(reader, up_writer),
                self._pump(up_reader, writer),
                return_exceptions=True,
            )
        except (OSError, asyncio.CancelledError):
            pass  # the target refused, or the proxy is closing: cut the client off
        finally:
            for end in (writer, up_writer):
                if end is not None:
                    end.transport.abort()
                    self._writers.discard(end)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await self._flowing.wait()
            data = await reader.read(_CHUNK)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            await self._flowing.wait()  # paused while reading: hold the bytes back
            writer.write(data)
            await writer.drain()
