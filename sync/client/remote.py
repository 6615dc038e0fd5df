"""Remote agents: a live local replica of a hub room with the SharedState API.

``async with sync.connect(url, agent=...) as remote:`` keeps a replica of the
room (a :class:`~crdt_state.SharedState` fed by the hub's updates). Branches
fork from the replica in O(1) and read locally; merging sends the branch's
changes and fork-base token to the hub, which judges conflicts with the same
``SharedState.commit`` as in-process merges. Conflicts the hub's policies do
not settle come back, and the client's own policies (``resolvers=`` given to
:func:`connect`, or to ``amerge``) settle them, ask for a retry, or raise.

**Read-your-writes.** The replica holds only what the hub confirmed. The
agent's own merges that are queued (offline) or in flight are an overlay on
top of it (:mod:`sync.client._overlay`): ``snapshot``, ``get``, ``read``, new forks
and their reads all show them at once. A merge computed on top of such a
merge names it in its *chain*, and the hub judges it against a base that
includes it: an agent never conflicts with itself. When a merge of a chain
fails, the later merges built on it fail too (:class:`~crdt_state.BrokenChain`);
each merge ends applied (maybe with settled conflicts) or failed, told to its
caller or, when the caller no longer waits, in :attr:`RemoteState.conflicted`
and :attr:`RemoteState.failed` (see :mod:`sync.client._outbox`).

**Identity and exactly-once.** Each :class:`RemoteState` has a writer id (128
random bits, kept in the ``local`` file when there is one, else new per
process) sent with every merge; the hub deduplicates on (writer, request id),
so a merge re-sent after a reconnect or a restart is applied once.

Offline: merges are queued (in the ``local`` SQLite file when given, so they
survive a restart) and sent in order when the connection is back.

**Several hubs.** :func:`connect` takes one URL or a list of URLs of the same room
served by several hubs (a cluster, or a hub and its stand-in on the same database).
When the connection drops or a hub cannot be reached, the client tries the next URL
at once (round robin); once every URL failed in a row, it waits with capped
exponential backoff and full jitter before the next round. Unanswered merges are
sent again on the new connection and deduplicated by the hub on (writer, request
id). :attr:`RemoteState.url` is the hub in use (or tried last).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from crdt_state import (
    Branch,
    Change,
    Conflict,
    CrdtStateError,
    MergeResult,
    Retry,
    SharedState,
    StateUpdate,
    VersionVector,
    resolvers,
)
from crdt_state.transact import arun_transaction
from sync.client._offline import OfflineStore, PendingMerge
from sync.client._outbox import Finished, Send
from sync.client._overlay import Overlay
from sync.client._remote_reads import RemoteReads
from sync.client._urls import hub_urls, mask, masked_logger, with_token
from sync.client.branch import RemoteBranch, RemoteToken
from sync.client.core import ClientCore, ClientEvent, Frame
from sync.wire.errors import AuthError, HubUnreachable, RemoteError

__all__ = [
    "CONNECT_TIMEOUT",
    "RemoteBranch",
    "RemoteError",
    "RemoteState",
    "RemoteToken",
    "connect",
]

log = logging.getLogger("crdt_state.client")
_ws_log = masked_logger("crdt_state.client.websocket")
"""What the websocket library logs about the client's connections, tokens masked."""
T = TypeVar("T")

CONNECT_TIMEOUT = 10.0
"""Seconds :func:`connect` and :func:`~sync.client.blocking.connect_blocking` wait for the
first sync with a hub."""
_ERROR_HEADER = "X-Crdt-State-Error"
"""A refused handshake's stable error code, when the hub names it (else ``token_refused``)."""


class RemoteState(RemoteReads):
    """A hub room seen from this process; create it with :func:`connect`."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        agent: str,
        token: str | None = None,
        local: str | Path | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object = resolvers.raise_conflict,
        reconnect: Retry | None = None,
        max_message: int = 4 * 2**20,
        schema: type[BaseModel] | None = None,
    ) -> None:
        self.urls = hub_urls(url)
        """Every hub URL of the room, in the order they are tried."""
        self._at = 0  # index in urls of the hub in use, or tried last
        self.agent = agent
        self._token = token
        # a mirror of the hub: it never writes on its own, and takes the hub's
        # content as it is (the hub is the authority; branches validate writes)
        self.replica = SharedState(
            resolvers=resolvers, default=default, schema=schema, initialize=False, follower=True
        )
        """The hub's confirmed state (without this agent's unconfirmed merges)."""
        store = OfflineStore(local) if local is not None else None
        self.writer = store.writer() if store is not None else secrets.token_hex(16)
        """This client's identity for the hub's deduplication (see ``docs/protocol.md``)."""
        self._core = ClientCore(self.replica, self.writer, store)
        self._outbox = self._core.outbox
        self._local = store is not None
        self._backoff = reconnect or Retry(attempts=1, base_delay=0.05, max_delay=2.0)
        self._max_message = max_message
        self._ws: ClientConnection | None = None
        self._synced = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._later: set[asyncio.Task[None]] = set()
        self._waiting: dict[int, tuple[asyncio.Future[MergeResult], PendingMerge]] = {}
        self._fatal: BaseException | None = None
        self._tried_all = False  # every URL failed once in a row since the start
        self._last_error = "no attempt yet"
        self.failed: list[CrdtStateError] = []
        """Merges that failed after their caller stopped waiting (queued offline, or in
        flight when the connection dropped), each as its typed error."""
        self.conflicted: list[Conflict] = []
        """Conflicts, with their resolutions, of merges that were applied after their
        caller stopped waiting."""

    @property
    def url(self) -> str:
        """The URL of the hub in use (or, while offline, the one tried last)."""
        return self.urls[self._at]

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, timeout: float = CONNECT_TIMEOUT) -> None:
        """Load the local file, start the connection, wait for the first sync.

        With a ``local`` file the wait ends as soon as every hub URL was tried once and
        none could be reached: the agent works offline at once (merges are queued).

        Raises:
            HubUnreachable: without a ``local`` file, no hub synced within ``timeout``
                seconds.
            AuthError: the hub refused the token.

        Whatever the outcome, no background task outlives a failed or cancelled start.
        """
        try:
            self._core.load()
            self._task = asyncio.create_task(self._run())
            await asyncio.wait_for(self._wait_ready(), timeout)
        except TimeoutError:
            if not self._local:
                await self.close()
                shown = tuple(mask(url, self._token) for url in self.urls)
                raise HubUnreachable(shown, timeout, self._last_error) from None
        except BaseException:
            await self.close()
            raise

    async def _wait_ready(self) -> None:
        """Until synced (or, with a local file, until every URL failed once)."""
        while not (self._synced.is_set() or (self._local and self._tried_all)):
            if self._fatal is not None:
                raise self._fatal
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._synced.wait(), 0.02)
        if self._fatal is not None:
            raise self._fatal

    async def close(self) -> None:
        """Disconnect; queued merges stay in the local file (if any)."""
        self._closing = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        for task in [self._task, *self._later]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._release_waiters()
        self._core.save()

    async def __aenter__(self) -> RemoteState:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """True while a synced connection to the hub is up."""
        return self._ws is not None and self._core.synced

    @property
    def read_only(self) -> bool:
        """True once the hub refused a write of this client (its token may only read):
        from then on merges fail at once with :class:`~sync.wire.errors.WriteDenied`."""
        return self._core.read_only

    def subscribe(self, listener: Callable[[StateUpdate], None]) -> Callable[[], None]:
        """Call ``listener(StateUpdate)`` after every change the replica takes from the hub.

        As :meth:`crdt_state.SharedState.subscribe`, on the replica: the listener sees
        the hub's confirmed changes (the agent's own merges once the hub applied them;
        not while they are queued or in flight), in order, under the replica's lock,
        on the thread that runs the connection. It must be quick and must not call
        back into the state. Returns a function that removes the listener.
        """
        return self.replica.subscribe(listener)

    def __repr__(self) -> str:
        state = "connected" if self.connected else "offline"
        extra = " read-only" if self.read_only else ""
        return (
            f"<RemoteState agent={self.agent!r} url={mask(self.url, self._token)!r} {state}"
            f"{extra} pending={self.pending} failed={len(self.failed)}>"
        )

    @property
    def pending(self) -> int:
        """Merges that have not ended yet (queued, in flight, or being settled)."""
        return len(self._outbox)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until every merge has ended (applied or failed)."""
        async with asyncio.timeout(timeout):
            while len(self._outbox):
                await asyncio.sleep(0.01)

    # -- branches and merges (reads: sync.client._remote_reads) -------------------------
    def fork(self, agent: str | None = None) -> RemoteBranch:
        """A branch at the replica's version, with this agent's unconfirmed merges (O(1))."""
        with self.replica.lock:  # the overlay and the fork taken at one moment
            overlay = self._outbox.snapshot()
            branch = self.replica.fork(agent or self.agent)
            return RemoteBranch(self, branch, self.replica.position, overlay)

    def _view_of(self, key: str, base_seq: int, overlay: Overlay) -> Any:
        """Top-level ``key`` at replica position ``base_seq`` with ``overlay`` applied."""
        return self._outbox.view_of(key, base_seq, overlay)

    async def acommit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str | None = None,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Merge changes computed from the room at ``base`` (the OCC form).

        With a token from :meth:`read`, the changes build on this agent's
        unconfirmed merges that the snapshot showed (they become the chain);
        with any other token (e.g. :attr:`token`), on the confirmed state only.
        """
        ops = self.replica.prepare(changes)
        return await self._submit(ops, base, agent or self.agent, resolvers, default)

    async def atransact(
        self,
        fn: Callable[[Branch], Awaitable[T] | T],
        *,
        agent: str | None = None,
        retry: Retry | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Run ``fn(branch)`` and merge through the hub, re-running on a retry.

        See :meth:`crdt_state.SharedState.transact` for the contract.
        """
        # a RemoteBranch offers the public API of a Branch (by composition)
        fork = cast("Callable[[str], Branch]", self.fork)
        return await arun_transaction(
            fork,
            fn,
            agent=agent or self.agent,
            retry=retry,
            resolvers=resolvers,
            default=default,
        )

    # -- merging through the hub ----------------------------------------------------------
    async def _submit(
        self,
        ops: list[Change],
        base: VersionVector,
        agent: str,
        resolvers_: Mapping[Any, object] | None,
        default: object | None,
    ) -> MergeResult:
        """Queue a merge, send it, and wait for how it ends (or return it as pending).

        Raises :class:`ConflictError`, :class:`BrokenChain` or :class:`RemoteError`
        when the merge fails while this call still waits.
        """
        table = self.replica.policies.overlay(resolvers_, default)
        merge = self._core.submit(ops, base, agent, table)
        if self._ws is None:
            return _pending_result(merge)
        future: asyncio.Future[MergeResult] = asyncio.get_running_loop().create_future()
        self._waiting[merge.order] = (future, merge)
        async with self._send_lock:
            await self._send(merge)
        return await future

    async def _send(self, merge: PendingMerge) -> None:
        """Send ``merge`` now, unless offline or already sent on this connection."""
        ws, frame = self._ws, self._core.frame_for(merge)
        if ws is not None and frame is not None:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(frame)

    async def _send_later(self, merge: PendingMerge, delay: float, connection: int) -> None:
        await asyncio.sleep(delay)
        if self._core.still_due(merge, connection):
            async with self._send_lock:
                await self._send(merge)

    async def _carry_out(self, events: list[ClientEvent]) -> None:
        """Do what the core asks: send frames, schedule delayed sends, tell callers."""
        for event in events:
            if isinstance(event, Frame):
                ws = self._ws
                if ws is not None:
                    with contextlib.suppress(ConnectionClosed):
                        await ws.send(event.data)
            elif isinstance(event, Send):
                connection = self._core.connection
                task = asyncio.create_task(self._send_later(event.merge, event.delay, connection))
                self._later.add(task)
                task.add_done_callback(self._later.discard)
            else:
                self._finished(event)

    def _finished(self, event: Finished) -> None:
        waiting = self._waiting.pop(event.order, None)
        future = waiting[0] if waiting is not None else None
        if future is not None and not future.done():
            if event.error is not None:
                future.set_exception(event.error)
            else:
                assert event.result is not None
                future.set_result(event.result)
            return
        if event.error is not None:
            log.warning("queued merge of %s failed: %s", self.agent, event.error)
            self.failed.append(event.error)
        elif event.result is not None and event.result.conflicts:
            self.conflicted.extend(event.result.conflicts)

    # -- the connection -----------------------------------------------------------------------
    async def _run(self) -> None:
        """Connect, pump, reconnect: round robin over :attr:`urls`, backoff per round.

        The backoff grows with every round of URLs that all failed, and is reset only by
        a connection that synced: a hub that drops the connection on one request before
        the sync (it is sent first) keeps the client backing off (see
        :meth:`ClientCore.disconnected` for how such a request ends).
        """
        failed_in_row = 0  # connections that failed or dropped since one last synced
        rounds = 0  # rounds of every URL failing in a row
        while not self._closing:
            synced = False
            close: tuple[int | None, str] = (None, "")
            try:
                async with ws_connect(
                    with_token(self.url, self._token),
                    max_size=self._max_message,
                    compression=None,
                    open_timeout=5,
                    logger=_ws_log,
                ) as ws:
                    self._ws = ws
                    try:
                        async with self._send_lock:
                            for frame in self._core.connected():
                                await ws.send(frame)
                        async for data in ws:
                            if isinstance(data, bytes):
                                await self._carry_out(self._core.receive(data))
                                if self._core.synced and not synced:
                                    synced = True
                                    failed_in_row = rounds = 0
                                    self._synced.set()
                    finally:
                        close = (ws.close_code, ws.close_reason or "")
                self._last_error = f"the hub closed the connection: {close[0]} {close[1]}"
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    self._fatal = self._refused(exc)
                    log.error("hub %s refused access: %s", self._shown(), self._fatal)
                    return
                self._lost(f"handshake refused: HTTP {status}")
            except InvalidURI as exc:  # checked up front; kept as a last guard
                self._fatal = exc
                return
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                self._lost(str(exc) or type(exc).__name__)
            except Exception as exc:  # a bad frame from the hub: drop this connection, reconnect
                self._lost(f"unexpected data ({type(exc).__name__}: {exc})")
            finally:
                self._ws = None
                for event in self._core.disconnected(*close):
                    self._finished(event)
                self._synced.clear()
                self._release_waiters()
            if self._closing:
                return
            failed_in_row += 1
            self._at = (self._at + 1) % len(self.urls)
            if failed_in_row >= len(self.urls):  # every URL failed in a row: back off
                failed_in_row = 0
                rounds += 1
                self._tried_all = True
                delay = self._backoff.cap(min(rounds, 30))
                await asyncio.sleep(self._backoff.rng.uniform(0, delay))

    def _shown(self) -> str:
        """The current URL as logs show it (token masked)."""
        return mask(self.url, self._token)

    def _lost(self, why: str) -> None:
        self._last_error = mask(why, self._token)
        log.info("connection to %s lost: %s", self._shown(), self._last_error)

    def _refused(self, exc: InvalidStatus) -> AuthError:
        """The typed error of a handshake refused with 401/403 (the hub's code when sent)."""
        response = exc.response
        code = response.headers.get(_ERROR_HEADER, "")
        if not (code.isascii() and code.replace("_", "").isalnum() and len(code) <= 40):
            code = "token_refused"
        body = bytes(response.body or b"").decode("utf-8", "replace").strip().splitlines()
        reason = mask(body[0][:200], self._token) if body else f"HTTP {response.status_code}"
        return AuthError(response.status_code, code, f"hub refused the token: {reason} ({code})")

    def _release_waiters(self) -> None:
        """Merges awaited when the connection drops return as pending; they stay queued."""
        waiting, self._waiting = self._waiting, {}
        for future, merge in waiting.values():
            if not future.done():
                future.set_result(_pending_result(merge))


def _pending_result(merge: PendingMerge) -> MergeResult:
    return MergeResult(token=merge.base, agent=merge.agent, fast_forward=False, pending=True)


@contextlib.asynccontextmanager
async def connect(
    url: str | Sequence[str],
    *,
    agent: str,
    token: str | None = None,
    local: str | Path | None = None,
    resolvers: Mapping[Any, object] | None = None,
    default: object = resolvers.raise_conflict,
    timeout: float = CONNECT_TIMEOUT,
    reconnect: Retry | None = None,
    schema: type[BaseModel] | None = None,
) -> AsyncIterator[RemoteState]:
    """Join the hub room at ``url`` as ``agent``; yields a :class:`RemoteState`.

    Args:
        url: a ``ws://``/``wss://`` URL, or a list of URLs of the same room (same path)
            on several hubs: the client fails over between them, round robin.
        agent: the agent's name (branches and merges carry it).
        token: an access token (sent as the ``token`` query parameter; never logged).
        local: a SQLite file keeping the writer id, the replica and queued merges
            across restarts; with it, an unreachable hub means starting offline at once.
        resolvers: the client's own conflict policies (``default`` for other paths).
        default: the policy of paths no resolver names.
        timeout: seconds to wait for the first sync (see :meth:`RemoteState.start`).
        reconnect: the backoff between rounds of failed connections.
        schema: a pydantic model: branch writes are validated against it and
            :meth:`RemoteState.model` reads the room typed.

    Raises:
        InvalidHubURL: a bad URL (at once, before any connection attempt).
        HubUnreachable: without ``local``, no hub synced within ``timeout``.
        AuthError: the hub refused the token.
    """
    remote = RemoteState(
        url,
        agent=agent,
        token=token,
        local=local,
        resolvers=resolvers,
        default=default,
        reconnect=reconnect,
        schema=schema,
    )
    await remote.start(timeout)
    try:
        yield remote
    finally:
        await remote.close()
