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
so a merge re-sent after a reconnect or a restart is applied once. Hence a ``local``
file serves one client at a time, and one room: another client holding it, or a file of
another room, is refused at once (:class:`~sync.wire.errors.LocalFileError`).

Offline: merges are queued (in the ``local`` SQLite file when given, so they
survive a restart) and sent in order when the connection is back. The connection
itself (reconnecting, failing over) is :class:`~sync.client._link.Link`.

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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, cast
from urllib.parse import urlsplit

from crdt_state import (
    Branch,
    Conflict,
    CrdtStateError,
    MergeResult,
    Retry,
    SharedState,
    StateUpdate,
    resolvers,
)
from crdt_state.model_type import ModelT, SchemaT
from crdt_state.transact import arun_transaction
from sync.client._link import Link
from sync.client._offline import OfflineStore, PendingMerge
from sync.client._overlay import Overlay
from sync.client._presence import Presence
from sync.client._remote_merges import RemoteMerges
from sync.client._remote_reads import RemoteReads
from sync.client._urls import hub_urls, with_token
from sync.client.branch import RemoteBranch, RemoteToken
from sync.client.core import ClientCore
from sync.wire.errors import HubUnreachable, RemoteError, UnsentMerges

__all__ = [
    "CONNECT_TIMEOUT",
    "RemoteBranch",
    "RemoteError",
    "RemoteState",
    "RemoteToken",
    "connect",
]

log = logging.getLogger("crdt_state.client")

CONNECT_TIMEOUT = 10.0
"""Seconds :func:`connect` and :func:`~sync.client.blocking.connect_blocking` wait for the
first sync with a hub."""
CLOSE_TIMEOUT = 10.0
"""How long closing a client waits for its pending merges (see :meth:`RemoteState.close`)."""


class RemoteState(RemoteReads[ModelT], RemoteMerges[ModelT]):
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
        schema: type[ModelT] | None = None,
    ) -> None:
        urls = hub_urls(url)
        for one in urls:
            with_token(one, token)  # InvalidHubURL: a token in the URL and another given
        self.agent = agent
        self._token = token
        # a mirror of the hub: it never writes on its own, and takes the hub's
        # content as it is (the hub is the authority; branches validate writes), but
        # refuses values too deep to read (a faulty hub must not break the replica)
        self.replica = SharedState(
            resolvers=resolvers,
            default=default,
            schema=schema,
            initialize=False,
            follower=True,
            check_depth=True,
        )
        """The hub's confirmed state (without this agent's unconfirmed merges)."""
        # held from here until close(): a file of another client, or of another room
        # (the URLs' path: any host may serve the room), is refused before any I/O
        room = urlsplit(urls[0]).path[1:]
        store = OfflineStore(local, room=room) if local is not None else None
        try:
            self.writer = store.writer() if store is not None else secrets.token_hex(16)
            """This client's identity for the hub's deduplication (see ``docs/protocol.md``)."""
            self._core = ClientCore(self.replica, self.writer, store)
            self._outbox = self._core.outbox
            self._local = store is not None
            self._link = Link(
                self._core,
                urls,
                token,
                reconnect or Retry(attempts=1, base_delay=0.05, max_delay=2.0),
                max_message,
                self._finished,
                self._release_waiters,
            )
        except BaseException:
            if store is not None:
                store.close()
            raise
        self._waiting: dict[int, tuple[asyncio.Future[MergeResult], PendingMerge]] = {}
        self.failed: list[CrdtStateError] = []
        """Merges that failed after their caller stopped waiting (queued offline, or in
        flight when the connection dropped), each as its typed error."""
        self.conflicted: list[Conflict] = []
        """Conflicts, with their resolutions, of merges that were applied after their
        caller stopped waiting."""
        self.presence = Presence(self.replica.client_id, agent)
        """This agent's awareness state, published to the room (see ``_presence``)."""

    @property
    def url(self) -> str:
        """The URL of the hub in use (or, while offline, the one tried last)."""
        return self._link.url

    @property
    def urls(self) -> tuple[str, ...]:
        """Every hub URL of the room, in the order they are tried."""
        return self._link.urls

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
            self._link.start()
            self.presence.start(lambda: self._link.ws)
            await asyncio.wait_for(self._wait_ready(), timeout)
        except TimeoutError:
            if not self._local:
                await self.close()
                shown = tuple(self._link.shown(url) for url in self.urls)
                raise HubUnreachable(shown, timeout, self._link.last_error) from None
        except BaseException:
            await self.close()
            raise

    async def _wait_ready(self) -> None:
        """Until synced (or, with a local file, until every URL failed once)."""
        link = self._link
        while not (link.synced.is_set() or (self._local and link.tried_all)):
            if link.fatal is not None:
                raise link.fatal
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.synced.wait(), 0.02)
        if link.fatal is not None:
            raise link.fatal

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Disconnect; without a ``local`` file, after the pending merges (up to ``timeout`` s).

        With a ``local`` file, merges that have not ended stay queued in it (the next
        client on that file sends them) and closing does not wait. Without one they
        would be lost, so closing first waits for them while the client keeps
        (re)connecting, to another hub of its list if its own is gone, and re-sends
        what was not answered.

        Raises:
            UnsentMerges: without a ``local`` file, when merges were still pending after
                the wait: they are not sent again, though one already sent may still be
                applied (raised after disconnecting; ``timeout=0`` does not wait).
        """
        if self.pending and timeout > 0 and not self._local:
            with contextlib.suppress(TimeoutError):
                await self.wait_idle(timeout)
        unsent = self.pending
        why = None if self._link.synced.is_set() else self._link.last_error
        await self.presence.stop()
        await self._link.close()
        self._release_waiters()
        self._core.save()
        if unsent and not self._local:
            urls = tuple(map(self._link.shown, self._link.urls))
            raise UnsentMerges(self.agent, unsent, urls, why)

    async def close_after_error(self) -> None:
        """Disconnect at once while an error propagates: lost merges are logged, not raised."""
        try:
            await self.close(timeout=0)
        except UnsentMerges as lost:
            log.warning("%s", lost)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.close_after_error()

    @property
    def connected(self) -> bool:
        """True while a synced connection to the hub is up."""
        return self._link.ws is not None and self._core.synced

    @property
    def read_only(self) -> bool:
        """True once the hub refused a write of this client (its token may only read).

        From then on merges fail at once with :class:`~sync.wire.errors.WriteDenied`.
        """
        return self._core.read_only

    @property
    def peers(self) -> dict[int, Any]:
        """The presence of the room's other clients: Yjs client id -> awareness state.

        Each state is the client's JSON awareness state as it announced it (for an agent
        of ``sync.connect``, what its :attr:`presence` publishes; for a stock Yjs client,
        e.g. ``{"user": ...}``); this agent's own client is left out, and a client that
        left is gone. A new dict (a snapshot) on each read; empty while offline.
        """
        return dict(self._core.peers.view)

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
            f"<RemoteState agent={self.agent!r} url={self._link.shown()!r} {state}"
            f"{extra} pending={self.pending} failed={len(self.failed)}>"
        )

    # -- branches and transactions (reads: _remote_reads; merges: _remote_merges) ----------
    def fork(self, agent: str | None = None) -> RemoteBranch[ModelT]:
        """A branch at the replica's version, with this agent's unconfirmed merges (O(1))."""
        with self.replica.lock:  # the overlay and the fork taken at one moment
            overlay = self._outbox.snapshot()
            branch = self.replica.fork(agent or self.agent)
            self.presence.forked(self.replica.token)
            return RemoteBranch(self, branch, self.replica.position, overlay)

    def _view_of(self, key: str, base_seq: int, overlay: Overlay) -> Any:
        """Top-level ``key`` at replica position ``base_seq`` with ``overlay`` applied."""
        return self._outbox.view_of(key, base_seq, overlay)

    async def atransact(
        self,
        fn: Callable[[Branch[ModelT]], object],
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
        fork = cast("Callable[[str], Branch[ModelT]]", self.fork)
        return await arun_transaction(
            fork,
            fn,
            agent=agent or self.agent,
            retry=retry,
            resolvers=resolvers,
            default=default,
        )


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
    schema: type[SchemaT] | None = None,
) -> AsyncIterator[RemoteState[SchemaT]]:
    """Join the hub room at ``url`` as ``agent``; yields a :class:`RemoteState`.

    Args:
        url: a ``ws://``/``wss://`` URL, or a list of URLs of the same room (same path)
            on several hubs: the client fails over between them, round robin.
        agent: the agent's name (branches and merges carry it).
        token: an access token (sent as the ``token`` query parameter; never logged).
        local: a SQLite file keeping the writer id, the replica and queued merges
            across restarts; with it, an unreachable hub means starting offline at once.
            It serves one client at a time (held until the client is closed or its
            process ends) and one room (the room of its first client).
        resolvers: the client's own conflict policies (``default`` for other paths).
        default: the policy of paths no resolver names.
        timeout: seconds to wait for the first sync (see :meth:`RemoteState.start`).
        reconnect: the backoff between rounds of failed connections.
        schema: a pydantic model: branch writes are validated against it and
            :meth:`RemoteState.model` reads the room typed.

    Raises:
        InvalidHubURL: a bad URL (at once, before any connection attempt).
        LocalFileInUse: another client (of this process or another) holds ``local``
            (at once; nothing is sent, the file is not changed).
        LocalFileWrongRoom: ``local`` belongs to another room (likewise).
        HubUnreachable: without ``local``, no hub synced within ``timeout``.
        AuthError: the hub refused the token.
    """
    remote: RemoteState[SchemaT] = RemoteState(
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
    except BaseException:
        await remote.close_after_error()
        raise
    await remote.close()
