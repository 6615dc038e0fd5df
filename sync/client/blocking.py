"""A blocking remote state for threaded code: the asyncio client on a private loop.

``with sync.connect_blocking(url, agent="a") as remote:`` gives the
:class:`~sync.client.remote.RemoteState` API without ``await``: branches are edited
locally from any thread and ``branch.merge()`` blocks until the hub answers.
One background thread runs the connection; calls from many threads are fine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

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
    WriteInListener,
)
from crdt_state import resolvers as builtin
from crdt_state.model_type import ModelT, SchemaT
from sync.client._blocking_branch import BlockingBranch
from sync.client.remote import (
    CLOSE_TIMEOUT,
    CONNECT_TIMEOUT,
    RemoteState,
    RemoteToken,
)

__all__ = ["BlockingBranch", "BlockingRemote", "connect_blocking"]

T = TypeVar("T")


class BlockingRemote(Generic[ModelT]):
    """A hub room for threaded code; create it with :func:`connect_blocking`.

    The same surface as :class:`~sync.client.remote.RemoteState` (the one it drives,
    :attr:`remote`), without ``await``. Calls wait for their outcome: a merge returns
    when the hub answered or, when the connection drops, as ``pending``.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        agent: str,
        token: str | None = None,
        local: str | Path | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object = builtin.raise_conflict,
        timeout: float = CONNECT_TIMEOUT,
        reconnect: Retry | None = None,
        schema: type[ModelT] | None = None,
    ) -> None:
        self.remote: RemoteState[ModelT] = RemoteState(
            url,
            agent=agent,
            token=token,
            local=local,
            resolvers=resolvers,
            default=default,
            reconnect=reconnect,
            schema=schema,
        )
        self.timeout = timeout
        """Seconds to wait for the first sync (as :func:`sync.connect`)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="crdt-state-client", daemon=True
        )
        self._thread.start()
        try:
            self._call(self.remote.start(timeout))
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the client's loop and wait for its result.

        The wait always ends: merges come back as pending when the connection drops.

        Raises:
            WriteInListener: called on the loop's own thread (from a listener of
                :meth:`subscribe`), where the wait could never end.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise WriteInListener(
                "a listener of this client runs on the client's own thread and may not wait "
                "for it (a merge from there would wait forever): hand the write to another "
                "thread"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- what RemoteState shows --------------------------------------------------------
    @property
    def agent(self) -> str:
        """The agent's name."""
        return self.remote.agent

    @property
    def writer(self) -> str:
        """This client's identity for the hub's deduplication."""
        return self.remote.writer

    @property
    def url(self) -> str:
        """The URL of the hub in use (or tried last)."""
        return self.remote.url

    @property
    def urls(self) -> tuple[str, ...]:
        """Every hub URL of the room, in the order they are tried."""
        return self.remote.urls

    @property
    def connected(self) -> bool:
        """True while a synced connection to the hub is up."""
        return self.remote.connected

    @property
    def read_only(self) -> bool:
        """True once the hub refused a write of this client."""
        return self.remote.read_only

    @property
    def pending(self) -> int:
        """Merges that have not ended yet."""
        return self.remote.pending

    @property
    def failed(self) -> list[CrdtStateError]:
        """Merges that failed after their caller stopped waiting."""
        return self.remote.failed

    @property
    def conflicted(self) -> list[Conflict]:
        """Conflicts of merges applied after their caller stopped waiting."""
        return self.remote.conflicted

    @property
    def replica(self) -> SharedState:
        """The hub's confirmed state."""
        return self.remote.replica

    @property
    def peers(self) -> dict[int, Any]:
        """The presence of the room's other clients (see ``RemoteState.peers``)."""
        return self.remote.peers

    # -- the SharedState API, blocking -------------------------------------------------
    @property
    def token(self) -> VersionVector:
        """The hub's confirmed token."""
        return self.remote.token

    def snapshot(self) -> dict[str, Any]:
        """The room as this agent sees it (see ``RemoteState.snapshot``)."""
        return self.remote.snapshot()

    def read(self) -> tuple[dict[str, Any], RemoteToken]:
        """``(snapshot, token)`` taken atomically (see ``RemoteState.read``)."""
        return self.remote.read()

    def get(self, path: Any, default: Any = None) -> Any:
        """The value at ``path`` as this agent sees it, or ``default``."""
        return self.remote.get(path, default)

    def get_update(self, since: VersionVector | None = None) -> bytes:
        """A Yjs update of the confirmed state."""
        return self.remote.get_update(since)

    def model(self) -> ModelT:
        """The room as an instance of the schema."""
        return self.remote.model()

    def subscribe(self, listener: Callable[[StateUpdate], None]) -> Callable[[], None]:
        """See ``RemoteState.subscribe`` (the listener runs on the client's thread)."""
        return self.remote.subscribe(listener)

    def fork(self, agent: str | None = None) -> BlockingBranch[ModelT]:
        """A branch at the replica's version, with this agent's unconfirmed merges."""
        return BlockingBranch(self, self.remote.fork(agent))

    def commit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str | None = None,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """The OCC form, blocking (see ``RemoteState.acommit``)."""
        return self._call(
            self.remote.acommit(changes, base, agent, resolvers=resolvers, default=default)
        )

    def transact(
        self,
        fn: Callable[[Branch[ModelT]], T],
        *,
        agent: str | None = None,
        retry: Retry | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Run ``fn(branch)`` (on the client's thread) and merge, re-running on a retry."""
        return self._call(
            self.remote.atransact(
                fn, agent=agent, retry=retry, resolvers=resolvers, default=default
            )
        )

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until every merge has ended and, while connected, the replica synced.

        As :meth:`RemoteState.wait_idle <sync.client.remote.RemoteState.wait_idle>`
        (``TimeoutError`` after ``timeout`` s).
        """
        self._call(self.remote.wait_idle(timeout))

    def __repr__(self) -> str:
        return "<Blocking" + repr(self.remote)[1:]

    # -- lifecycle ---------------------------------------------------------------------
    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Disconnect and stop the background thread (idempotent).

        As :meth:`RemoteState.close <sync.client.remote.RemoteState.close>`: waits up to
        ``timeout`` s for pending merges and raises ``UnsentMerges`` when, without a
        ``local`` file, some never reached a hub.
        """
        if self._loop.is_running():
            try:
                self._call(self.remote.close(timeout))
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10.0)
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        elif self._loop.is_running():
            try:
                self._call(self.remote.close_after_error())
            finally:
                self._stop_loop()


def connect_blocking(
    url: str | Sequence[str],
    *,
    agent: str,
    token: str | None = None,
    local: str | Path | None = None,
    resolvers: Mapping[Any, object] | None = None,
    default: object = builtin.raise_conflict,
    timeout: float = CONNECT_TIMEOUT,
    reconnect: Retry | None = None,
    schema: type[SchemaT] | None = None,
) -> BlockingRemote[SchemaT]:
    """Connect to a hub from threaded code: :func:`sync.connect` without asyncio.

    It takes the same arguments and the same timeout; use it in a ``with`` block.

    Raises:
        InvalidHubURL: a bad URL.
        LocalFileInUse: another client (of this process or another) holds ``local``
            (at once; nothing is sent, the file is not changed).
        LocalFileWrongRoom: ``local`` belongs to another room (likewise).
        HubUnreachable: without ``local``, no hub synced within ``timeout``.
        AuthError: the hub refused the token.
    """
    return BlockingRemote(
        url,
        agent=agent,
        token=token,
        local=local,
        resolvers=resolvers,
        default=default,
        timeout=timeout,
        reconnect=reconnect,
        schema=schema,
    )
