"""Writing to one client connection: the writer task and closes that never hang.

:func:`pump` sends the frames a session's outbox holds, in order, waiting for
the client to read; :func:`close_later` closes a connection from synchronous
code and cuts it off when the client does not answer the close handshake
within a grace period (a client that does not read never answers);
:func:`close_reading` closes one from its handler, reading what is still on its way.
"""

from __future__ import annotations

import asyncio
import contextlib

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from sync.server._room import Session

__all__ = ["close_later", "close_reading", "pump"]

_closing: set[asyncio.Task[None]] = set()


def close_later(ws: ServerConnection, code: int, reason: str, grace: float = 1.0) -> None:
    """Close ``ws`` from synchronous code; the close handshake runs as a task.

    A client that does not answer within ``grace`` seconds (it does not read) is cut off.
    """
    task = asyncio.ensure_future(_close_within(ws, code, reason, grace))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _close_within(ws: ServerConnection, code: int, reason: str, grace: float) -> None:
    try:
        async with asyncio.timeout(grace):
            await ws.close(code, reason)
    except TimeoutError:
        ws.transport.abort()


async def close_reading(ws: ServerConnection, code: int, reason: str) -> None:
    """Close ``ws`` from its handler, reading and dropping what the client sent meanwhile.

    A client may have sent more messages than the connection queues (``max_queue``)
    before a handler that gave up stopped reading: the transport then reads no more, and
    the client's answer to the close frame waits behind them until the close times out
    (``close_timeout``, 10 s, on both sides). Read, the handshake ends at once.
    """
    closer = asyncio.ensure_future(ws.close(code, reason))
    with contextlib.suppress(ConnectionClosed):
        while not closer.done():
            await ws.recv()
    await closer


async def pump(ws: ServerConnection, session: Session) -> None:
    """Send the session's queued frames, in order, until its outbox closes or disconnection."""
    while True:
        frame = await session.outbox.get()
        if frame is None:
            return
        session.busy = True
        try:
            while frame is not None:  # send what is queued without waking up again
                try:
                    await ws.send(frame)
                except ConnectionClosed:
                    return
                frame = session.outbox.get_nowait()
        finally:
            session.busy = False
