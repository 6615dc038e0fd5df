"""The asyncio driver of a :class:`~sync.client.core.ClientCore`: one connection at a time.

:class:`Link` keeps the core connected to one of the room's hub URLs: it connects,
sends what the core asks, feeds it what the hub sends, and after a drop moves to the
next URL (round robin), backing off (capped exponential, full jitter) once every URL
failed in a row. The backoff is reset only by a connection that synced: merges are sent
before sync step 1, so a hub that drops the connection on a merge does so before the
sync, and the client keeps backing off instead of storming it.

How a merge ends is told through ``on_finished``; ``on_dropped`` runs after every
drop (the owner returns the merges still awaited as pending). The owner is
:class:`~sync.client.remote.RemoteState`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from crdt_state import Retry
from sync.client._events import ClientEvent, Finished, Frame, Send
from sync.client._flush import FlushProgress
from sync.client._offline import PendingMerge
from sync.client._urls import mask, masked_logger, with_token
from sync.client.core import ClientCore
from sync.wire.errors import AuthError, InvalidHubURL
from sync.wire.rooms import ROOM_NAME_REFUSALS

__all__ = ["ERROR_HEADER", "Link"]

log = logging.getLogger("crdt_state.client")
_ws_log = masked_logger("crdt_state.client.websocket")
"""What the websocket library logs about the client's connections, tokens masked."""
ERROR_HEADER: Final = "X-Crdt-State-Error"
"""A refused handshake's stable error code, when the hub names it (else ``token_refused``)."""


OPEN_TIMEOUT: Final = 3.0
"""Seconds a hub has to complete the websocket handshake before the next URL is tried."""
PING_INTERVAL: Final = 5.0
PING_TIMEOUT: Final = 10.0
"""A connection whose hub answers no ping for this long is dropped (a frozen hub): at
most ~15 s, where websockets' defaults (20 + 20 s) kept an agent's merge waiting ~45 s
while another hub of its list already served the room."""


class Link:
    """Keeps ``core`` connected to one of ``urls`` and carries out what it asks.

    Args:
        core: the protocol state it drives.
        urls: the room's hub URLs (checked), tried in order, round robin.
        token: the access token (sent as the ``token`` query parameter; masked in logs).
        backoff: the wait between rounds of URLs that all failed.
        max_message: the largest message accepted from the hub, in bytes.
        on_finished: told every merge that ended.
        on_dropped: called after every drop of the connection.
    """

    def __init__(
        self,
        core: ClientCore,
        urls: tuple[str, ...],
        token: str | None,
        backoff: Retry,
        max_message: int,
        on_finished: Callable[[Finished], None],
        on_dropped: Callable[[], None],
    ) -> None:
        self.core = core
        self.urls = urls
        self._token = token
        self._backoff = backoff
        self._max_message = max_message
        self._on_finished = on_finished
        self._on_dropped = on_dropped
        self.at = 0
        """The index in :attr:`urls` of the hub in use, or tried last."""
        self.ws: ClientConnection | None = None
        self.synced = asyncio.Event()
        """Set while the current connection is synced."""
        self.tried_all = False
        """True once every URL failed in a row (since the start)."""
        self.fatal: BaseException | None = None
        """Why the link gave up for good (a refused token), else ``None``."""
        self.last_error = "no attempt yet"
        """Why the last connection failed or dropped, for people (tokens masked)."""
        self._send_lock = asyncio.Lock()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._later: set[asyncio.Task[None]] = set()
        self._flush: FlushProgress | None = None  # the queued merges sent on connecting

    @property
    def url(self) -> str:
        """The URL of the hub in use, or tried last."""
        return self.urls[self.at]

    def shown(self, text: str | None = None) -> str:
        """``text`` (default: the current URL) with the token masked."""
        return mask(self.url if text is None else text, self._token)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start connecting (in a task of the running loop)."""
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        """Close the connection and end every task of the link."""
        self._closing = True
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        for task in [self._task, *self._later]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # -- sending ------------------------------------------------------------------------
    async def send(self, merge: PendingMerge) -> None:
        """Send ``merge`` now, unless offline or already sent on this connection."""
        async with self._send_lock:
            ws, frame = self.ws, self.core.frame_for(merge)
            if ws is not None and frame is not None:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(frame)

    async def _send_later(self, merge: PendingMerge, delay: float, connection: int) -> None:
        await asyncio.sleep(delay)
        if self.core.still_due(merge, connection):
            await self.send(merge)

    async def _carry_out(self, events: list[ClientEvent]) -> None:
        """Do what the core asks: send frames, schedule delayed sends, tell the owner."""
        for event in events:
            if isinstance(event, Frame):
                ws = self.ws
                if ws is not None:
                    with contextlib.suppress(ConnectionClosed):
                        await ws.send(event.data)
            elif isinstance(event, Send):
                connection = self.core.connection
                task = asyncio.create_task(self._send_later(event.merge, event.delay, connection))
                self._later.add(task)
                task.add_done_callback(self._later.discard)
            else:
                self._finished(event)

    def _finished(self, event: Finished) -> None:
        if self._flush is not None:
            self._flush.ended(event.order)
        self._on_finished(event)

    # -- the connection ------------------------------------------------------------------
    async def _run(self) -> None:
        """Connect, pump, reconnect: round robin over :attr:`urls`, backoff per round."""
        failed_in_row = 0  # connections that failed or dropped since one last synced
        rounds = 0  # rounds of every URL failing in a row
        # the URLs whose hub refused the token at its last try: one hub of a cluster set
        # up with another secret must not end the client while the others take it
        refused: dict[int, AuthError] = {}
        while not self._closing:
            close: tuple[int | None, str] = (None, "")
            refusal = False
            try:
                async with ws_connect(
                    with_token(self.url, self._token),
                    max_size=self._max_message,
                    compression=None,
                    # a frozen hub (SIGSTOP, a dead host without a reset) must not keep the
                    # client from the other URLs: a healthy hub answers in milliseconds
                    open_timeout=OPEN_TIMEOUT,
                    ping_interval=PING_INTERVAL,
                    ping_timeout=PING_TIMEOUT,
                    logger=_ws_log,
                ) as ws:
                    self.ws = ws
                    try:
                        await self._pump(ws)
                    finally:
                        # a connection that synced resets the backoff however it ended: a
                        # killed hub's (a reset, no close frame) raises out of the pump, and
                        # the next URL must then be tried at once, not after a backoff
                        if self.synced.is_set():
                            failed_in_row = rounds = 0
                        close = (ws.close_code, ws.close_reason or "")
                self.last_error = f"the hub closed the connection: {close[0]} {close[1]}"
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    error = self._refused(exc)
                    refusal = True
                    if self.at not in refused:
                        log.error("hub %s refused access: %s", self.shown(), error)
                    refused[self.at] = error
                    self.last_error = str(error)
                    if len(refused) == len(self.urls):  # every hub of the list refuses it
                        self.fatal = error
                        return
                code = exc.response.headers.get(ERROR_HEADER, "")
                if code in ROOM_NAME_REFUSALS:  # no other hub would take the name either
                    self.fatal = InvalidHubURL(
                        f"hub {self.shown()} refused the room name (HTTP {status}, {code})"
                    )
                    log.error("%s", self.fatal)
                    return
                self._lost(f"handshake refused: HTTP {status}")
            except InvalidURI as exc:  # checked up front; kept as a last guard
                self.fatal = exc
                return
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                self._lost(str(exc) or type(exc).__name__)
            except Exception as exc:  # a bad frame from the hub: drop this connection, reconnect
                self._lost(f"unexpected data ({type(exc).__name__}: {exc})", logging.WARNING)
            finally:
                if not refusal:  # tried again in its turn: its secret may have been fixed
                    refused.pop(self.at, None)
                self.ws = None
                for event in self.core.disconnected(*close):
                    self._finished(event)
                if self._flush is not None:
                    self._flush.stop()  # what is left is sent again on the next connection
                    self._flush = None
                self.synced.clear()
                self._on_dropped()
            if self._closing:
                return
            failed_in_row += 1
            self.at = (self.at + 1) % len(self.urls)
            if failed_in_row >= len(self.urls):  # every URL failed in a row: back off
                failed_in_row = 0
                rounds += 1
                self.tried_all = True
                delay = self._backoff.cap(min(rounds, 30))
                await asyncio.sleep(self._backoff.rng.uniform(0, delay))

    async def _pump(self, ws: ClientConnection) -> bool:
        """Run one connection until it closes; True when it synced (:attr:`synced`)."""
        async with self._send_lock:
            frames = self.core.connected()
            if self.core.flushed:
                self._flush = FlushProgress(self.core.flushed, self.shown(), self.core.writer)
            for frame in frames:
                await ws.send(frame)
        async for data in ws:
            if isinstance(data, bytes):
                await self._carry_out(self.core.receive(data))
                if self.core.synced and not self.synced.is_set():
                    self.synced.set()
        return self.synced.is_set()

    def _lost(self, why: str, level: int = logging.INFO) -> None:
        """Note why the connection ended (``level``: WARNING when the hub misbehaved)."""
        self.last_error = self.shown(why)
        log.log(level, "connection to %s lost: %s", self.shown(), self.last_error)

    def _refused(self, exc: InvalidStatus) -> AuthError:
        """The typed error of a handshake refused with 401/403 (the hub's code when sent)."""
        response = exc.response
        code = response.headers.get(ERROR_HEADER, "")
        if not (code.isascii() and code.replace("_", "").isalnum() and len(code) <= 40):
            code = "token_refused"
        body = bytes(response.body or b"").decode("utf-8", "replace").strip().splitlines()
        reason = self.shown(body[0][:200]) if body else f"HTTP {response.status_code}"
        return AuthError(response.status_code, code, f"hub refused the token: {reason} ({code})")
