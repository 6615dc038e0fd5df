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
from urllib.parse import urlencode, urlsplit, urlunsplit

from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from crdt_state import (
    Branch,
    Change,
    Conflict,
    CrdtStateError,
    MergeResult,
    Retry,
    SharedState,
    VersionVector,
    resolvers,
)
from crdt_state.transact import arun_transaction
from sync.client._offline import OfflineStore, PendingMerge
from sync.client._outbox import Finished, Send
from sync.client._overlay import Overlay
from sync.client._remote_reads import RemoteReads
from sync.client.branch import RemoteBranch, RemoteToken
from sync.client.core import ClientCore, ClientEvent, Frame
from sync.wire.errors import AuthError, InvalidHubURL, RemoteError

__all__ = ["RemoteBranch", "RemoteError", "RemoteState", "RemoteToken", "connect"]

log = logging.getLogger("crdt_state.client")
T = TypeVar("T")


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
    async def start(self, timeout: float = 10.0) -> None:
        """Load the local file, start the connection, wait for the first sync.

        With a ``local`` file the wait is skipped when the hub is unreachable
        (the agent works offline); without one, :class:`ConnectionError` is
        raised after ``timeout`` seconds.
        """
        self._core.load()
        self._task = asyncio.create_task(self._run())
        try:
            await asyncio.wait_for(self._wait_synced(), timeout)
        except TimeoutError:
            if not self._local:
                await self.close()
                where = " or ".join(self.urls)
                raise ConnectionError(f"could not sync with {where} in {timeout} s") from None

    async def _wait_synced(self) -> None:
        while not self._synced.is_set():
            if self._fatal is not None:
                raise self._fatal
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._synced.wait(), 0.05)
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
    def _connect_url(self) -> str:
        if not self._token:
            return self.url
        parts = urlsplit(self.url)
        query = (parts.query + "&" if parts.query else "") + urlencode({"token": self._token})
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))

    async def _run(self) -> None:
        """Connect, pump, reconnect: round robin over :attr:`urls`, backoff per round."""
        failed_in_row = 0  # connections that failed or dropped since one last synced
        rounds = 0  # rounds of every URL failing in a row
        while not self._closing:
            synced = False
            try:
                async with ws_connect(
                    self._connect_url(),
                    max_size=self._max_message,
                    compression=None,
                    open_timeout=5,
                ) as ws:
                    self._ws = ws
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
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    self._fatal = AuthError(
                        status, "token_refused", f"hub refused the token: HTTP {status}"
                    )
                    log.error("hub %s refused access: HTTP %d", self.url, status)
                    return
                log.info("hub %s handshake failed: HTTP %d", self.url, status)
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                log.info("connection to %s lost: %s", self.url, exc)
            except Exception:  # a bad frame from the hub: drop this connection, reconnect
                log.exception("unexpected data from %s; reconnecting", self.url)
            finally:
                self._ws = None
                self._core.disconnected()
                self._synced.clear()
                self._release_waiters()
            if self._closing:
                return
            failed_in_row += 1
            self._at = (self._at + 1) % len(self.urls)
            if failed_in_row >= len(self.urls):  # every URL failed in a row: back off
                failed_in_row = 0
                rounds += 1
                delay = self._backoff.cap(min(rounds, 30))
                await asyncio.sleep(self._backoff.rng.uniform(0, delay))

    def _release_waiters(self) -> None:
        """Merges awaited when the connection drops return as pending; they stay queued."""
        waiting, self._waiting = self._waiting, {}
        for future, merge in waiting.values():
            if not future.done():
                future.set_result(_pending_result(merge))


def hub_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """The hub URLs of one room, checked: ``ws://`` or ``wss://``, a host, one room path.

    Args:
        url: one URL, or the URLs of the same room on several hubs.

    Returns:
        The URLs, in order.

    Raises:
        InvalidHubURL: no URL, a URL that is not ``ws://host/...`` or ``wss://host/...``,
            or URLs naming different rooms (different paths).
    """
    urls = (url,) if isinstance(url, str) else tuple(url) if isinstance(url, Sequence) else ()
    if not urls:
        raise InvalidHubURL(f"a hub URL or a list of hub URLs is needed, got {url!r}")
    for one in urls:
        if not isinstance(one, str) or urlsplit(one).scheme not in ("ws", "wss"):
            raise InvalidHubURL(f"a hub URL starts with ws:// or wss://, got {one!r}")
        if not urlsplit(one).hostname:
            raise InvalidHubURL(f"the hub URL names no host: {one!r}")
    rooms = {urlsplit(one).path.rstrip("/") for one in urls}
    if len(rooms) > 1:
        raise InvalidHubURL(f"the hub URLs must name the same room (path), got {list(urls)!r}")
    return urls


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
    timeout: float = 10.0,
    reconnect: Retry | None = None,
    schema: type[BaseModel] | None = None,
) -> AsyncIterator[RemoteState]:
    """Join the hub room at ``url`` as ``agent``; yields a :class:`RemoteState`.

    ``url`` is one ``ws://``/``wss://`` URL, or a list of URLs of the same room on
    several hubs (all with the same path, the room; the client fails over between them, round
    robin, see :mod:`sync.client.remote`);

    ``token`` is an access token (sent as the ``token`` query parameter);
    ``local`` a SQLite file keeping the writer id, the replica and queued
    merges across restarts; ``resolvers``/``default`` the client's own conflict
    policies; ``schema`` a pydantic model: branch writes are validated against
    it and :meth:`RemoteState.model` reads the room typed.
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
