"""Remote agents: a live local replica of a hub room with the SharedState API.

``async with sync.connect(url, agent=...) as remote:`` keeps a replica of the
room (a :class:`~crdt_state.SharedState` fed by the hub's updates). Branches
fork from the replica in O(1) and read locally; merging sends the branch's
changes and fork-base token to the hub, which judges conflicts with the same
``SharedState.commit`` as in-process merges. Conflicts the hub's policies do
not settle come back, and the client's own policies (``resolvers=`` given to
:func:`connect`, or to ``amerge``) settle them, ask for a retry, or raise.

Offline: merges made while disconnected are queued (in the ``local`` SQLite
file when given, so they survive a restart) and sent in order when the
connection is back, each judged against its own fork base. Reconnection uses
capped exponential backoff with full jitter.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from crdt_state import (
    MISSING,
    Branch,
    Change,
    Conflict,
    ConflictError,
    CrdtStateError,
    MergeResult,
    Retry,
    SharedState,
    VersionVector,
    resolvers,
)
from crdt_state.resolvers import PolicyTable
from crdt_state.transact import arun_transaction

from . import protocol as p
from .offline import OfflineStore, PendingMerge
from .wire import conflict_from_record, wire_changes

__all__ = ["RemoteBranch", "RemoteError", "RemoteState", "connect"]

log = logging.getLogger("crdt_state.client")
T = TypeVar("T")

_MAX_ROUNDS = 64
_ROUND_BACKOFF = Retry(attempts=_MAX_ROUNDS, base_delay=0.002, max_delay=0.2)


class RemoteError(CrdtStateError):
    """The hub refused a merge for a reason other than a conflict (``code`` from the hub)."""

    code = "remote_error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, details={"hub_code": code})
        self.code = code


@dataclass
class _Outcome:
    status: p.MergeStatus
    token: VersionVector
    reply: p.MergeResult


class RemoteBranch(Branch):
    """A branch of a remote room: reads and edits locally, merges through the hub."""

    def __init__(self, remote: RemoteState, agent: str, base_seq: int, base: VersionVector) -> None:
        super().__init__(remote.replica, agent, base_seq, base)
        self._remote = remote

    def merge(self, **options: Any) -> MergeResult:
        raise TypeError("a remote branch merges with 'await branch.amerge()' or 'async with'")

    async def amerge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """Send the branch to the hub; see :meth:`RemoteState.acommit` for the outcome.

        While offline this returns at once with ``MergeResult.pending`` true;
        the merge is sent on reconnect.
        """
        if self._status == "merged" and self._result is not None:
            return self._result
        self._writable()
        result = await self._remote._submit(self.ops(), self.base, self.agent, resolvers, default)
        self._status = "merged"
        self._result = result
        return result


class RemoteState:
    """A hub room seen from this process; create it with :func:`connect`."""

    def __init__(
        self,
        url: str,
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
        self.url = url
        self.agent = agent
        self._token = token
        self.replica = SharedState(
            resolvers=resolvers, default=default, schema=schema, initialize=False
        )
        # a mirror of the hub: it never writes on its own, and takes the hub's
        # content as it is (the hub is the authority; branches validate writes)
        self.replica._tick_remote = False
        self.replica._validate_updates = False
        self._store = OfflineStore(local) if local is not None else None
        self._backoff = reconnect or Retry(attempts=1, base_delay=0.05, max_delay=2.0)
        self._max_message = max_message
        self._ws: ClientConnection | None = None
        self._synced = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, PendingMerge] = {}
        self._waiters: dict[int, asyncio.Future[_Outcome | None]] = {}
        self._fatal: BaseException | None = None
        self._seq = itertools.count(1)
        self.failed: list[ConflictError | CrdtStateError] = []
        """Offline merges that could not be applied after reconnecting."""
        self.connects = 0

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, timeout: float = 10.0) -> None:
        """Load the local file, start the connection, wait for the first sync.

        With a ``local`` file the wait is skipped when the hub is unreachable
        (the agent works offline); without one, :class:`ConnectionError` is
        raised after ``timeout`` seconds.
        """
        if self._store is not None:
            for update in self._store.load_replica():
                self.replica.apply_update(update, origin="local-file")
            for pending in self._store.load_pending():
                self._pending[pending.request_id] = pending
            last = max((m.order for m in self._pending.values()), default=0)
            self._seq = itertools.count(last + 1)
        self._task = asyncio.create_task(self._run())
        try:
            await asyncio.wait_for(self._wait_synced(), timeout)
        except TimeoutError:
            if self._store is None:
                await self.close()
                raise ConnectionError(f"could not sync with {self.url} in {timeout} s") from None

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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._release_waiters()
        if self._store is not None:
            self._store.save_replica(self.replica.get_update())
            self._store.close()

    async def __aenter__(self) -> RemoteState:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """True while a synced connection to the hub is up."""
        return self._ws is not None and self._synced.is_set()

    @property
    def pending(self) -> int:
        """Merges waiting to be sent or acknowledged."""
        return len(self._pending)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until every queued merge has been acknowledged."""
        async with asyncio.timeout(timeout):
            while self._pending:
                await asyncio.sleep(0.01)

    # -- the SharedState API ---------------------------------------------------------------
    @property
    def token(self) -> VersionVector:
        return self.replica.token

    def snapshot(self) -> dict[str, Any]:
        return self.replica.snapshot()

    def read(self) -> tuple[dict[str, Any], VersionVector]:
        return self.replica.read()

    def get(self, path: Any, default: Any = None) -> Any:
        return self.replica.get(path, default)

    def get_update(self, since: VersionVector | None = None) -> bytes:
        return self.replica.get_update(since)

    def model(self) -> BaseModel:
        """The room as a validated instance of the schema given to :func:`connect`."""
        return self.replica.model()

    def fork(self, agent: str | None = None) -> RemoteBranch:
        """A branch of the replica at its current version (O(1))."""
        with self.replica._lock:
            log_ = self.replica._log
            return RemoteBranch(self, agent or self.agent, log_.head_seq, log_.head_token)

    async def acommit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str | None = None,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Merge changes computed from the room at ``base`` (the OCC form)."""
        ops = self.replica._ops_from(changes)
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
        return await arun_transaction(
            self.fork,
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
        table = self.replica.policies.overlay(resolvers_, default)
        conflicts: list[Conflict] = []
        for round_ in range(_MAX_ROUNDS):
            if round_ >= 2:  # contention: others keep merging between our rounds
                await asyncio.sleep(_ROUND_BACKOFF.delay(round_ - 1))
            pending = PendingMerge(
                request_id=secrets.randbits(52),
                order=next(self._seq),
                agent=agent,
                base=base,
                ops=ops,
                combine=_combined(ops, table),
            )
            self._queue(pending)
            if not self.connected:
                return MergeResult(token=base, agent=agent, fast_forward=False, pending=True)
            waiter: asyncio.Future[_Outcome | None] = asyncio.get_running_loop().create_future()
            self._waiters[pending.request_id] = waiter
            await self._send_pending(pending)
            outcome = await waiter
            if outcome is None:  # the connection dropped: the merge stays queued
                return MergeResult(token=base, agent=agent, fast_forward=False, pending=True)
            reply = outcome.reply
            if outcome.status is not p.MergeStatus.ERROR:
                return MergeResult(
                    token=outcome.token,
                    applied=tuple(tuple(x) for x in reply.applied),
                    conflicts=(*conflicts, *(conflict_from_record(c) for c in reply.conflicts)),
                    fast_forward=False,
                    agent=agent,
                )
            ops, base, settled = self._settle(reply, ops, table, agent)
            conflicts.extend(settled)
        raise ConflictError("conflicts kept coming back from the hub", conflicts=conflicts)

    def _settle(
        self, reply: p.MergeResult, ops: list[Change], table: PolicyTable, agent: str
    ) -> tuple[list[Change], VersionVector, list[Conflict]]:
        """Resolve a refused merge's conflicts with the client's policies.

        Returns the changes to send again (resolved values substituted), the
        base to judge them against (the hub's token at refusal) and the
        conflicts with their resolutions. Raises
        :class:`ConflictError` (``retry`` set when a policy asked for it) or
        :class:`RemoteError`.
        """
        error = reply.error
        assert error is not None
        if error.code not in ("conflict", "retry"):
            raise RemoteError(error.code, error.message)
        settled: dict[tuple[str, ...], Any] = {}
        final: list[Conflict] = []
        escalated = []
        for record in reply.conflicts:
            conflict = conflict_from_record(record)
            if not conflict.resolved:
                conflict, escalation = table.resolve(conflict)
                if escalation is not None:
                    escalated.append(escalation)
            final.append(conflict)
            if conflict.resolved:
                settled[conflict.path] = conflict.resolution
        if escalated:
            raise ConflictError(
                f"{len(escalated)} conflicting write(s) not resolved by policy",
                conflicts=final,
                retry=all(e.retry for e in escalated),
            )
        new_ops: list[Change] = []
        for op in ops:
            if op.path in settled:
                value = settled[op.path]
                new_ops.append(
                    Change("delete", op.path) if value is MISSING else Change("set", op.path, value)
                )
            else:
                new_ops.append(op)
        return new_ops, VersionVector.from_state(reply.token), final

    def _queue(self, pending: PendingMerge) -> None:
        self._pending[pending.request_id] = pending
        if self._store is not None:
            self._store.add_pending(pending)

    def _done(self, request_id: int) -> None:
        self._pending.pop(request_id, None)
        if self._store is not None:
            self._store.remove_pending(request_id)

    async def _send_pending(self, pending: PendingMerge) -> None:
        ws = self._ws
        if ws is None:
            return
        frame = p.encode_merge_request(
            pending.request_id,
            pending.agent,
            pending.base.to_state(),
            wire_changes(pending.ops, pending.combine.__contains__),
        )
        with contextlib.suppress(ConnectionClosed):
            await ws.send(frame)

    # -- the connection -----------------------------------------------------------------------
    def _connect_url(self) -> str:
        if not self._token:
            return self.url
        parts = urlsplit(self.url)
        query = (parts.query + "&" if parts.query else "") + urlencode({"token": self._token})
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))

    async def _run(self) -> None:
        attempt = 0
        while not self._closing:
            try:
                async with ws_connect(
                    self._connect_url(),
                    max_size=self._max_message,
                    compression=None,
                    open_timeout=5,
                ) as ws:
                    self._ws = ws
                    attempt = 0
                    self.connects += 1
                    await ws.send(p.encode_sync_step1(self.replica.token.to_state()))
                    async for data in ws:
                        if isinstance(data, bytes):
                            await self._receive(ws, data)
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    self._fatal = PermissionError(f"hub refused the token: HTTP {status}")
                    log.error("hub refused access: HTTP %d", status)
                    return
                log.info("hub handshake failed: HTTP %d", status)
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                log.info("connection to %s lost: %s", self.url, exc)
            except Exception:  # a bad frame from the hub: drop this connection, reconnect
                log.exception("unexpected data from %s; reconnecting", self.url)
            finally:
                self._ws = None
                self._synced.clear()
                self._release_waiters()
            if self._closing:
                return
            attempt += 1
            await asyncio.sleep(self._backoff.rng.uniform(0, self._backoff.cap(min(attempt, 30))))

    def _release_waiters(self) -> None:
        """Merges awaiting an answer when the connection drops return as pending."""
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_result(None)

    async def _receive(self, ws: ClientConnection, data: bytes) -> None:
        message = p.decode_message(data)
        if isinstance(message, p.SyncStep1):
            since = VersionVector.from_state(message.state_vector)
            await ws.send(p.encode_sync_step2(self.replica.get_update(since)))
        elif isinstance(message, (p.SyncStep2, p.SyncUpdate)):
            self.replica.apply_update(message.update, origin="hub")
            if self._store is not None and self._store.append_replica(message.update) > 1_000:
                self._store.save_replica(self.replica.get_update())  # fold the rows into one
            if isinstance(message, p.SyncStep2) and not self._synced.is_set():
                self._synced.set()
                for pending in sorted(self._pending.values(), key=lambda m: m.order):
                    await self._send_pending(pending)
        elif isinstance(message, p.MergeResult):
            await self._on_result(message)

    async def _on_result(self, reply: p.MergeResult) -> None:
        pending = self._pending.get(reply.request_id)
        self._done(reply.request_id)
        outcome = _Outcome(reply.status, VersionVector.from_state(reply.token), reply)
        waiter = self._waiters.pop(reply.request_id, None)
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(outcome)
            return
        if pending is None or reply.status is not p.MergeStatus.ERROR:
            return
        # an offline merge came back refused: settle it with the client's policies
        try:
            ops, base, _ = self._settle(reply, pending.ops, self.replica.policies, pending.agent)
        except (ConflictError, RemoteError) as exc:
            log.warning("queued merge of %s refused: %s", pending.agent, exc)
            self.failed.append(exc)
            return
        again = PendingMerge(
            secrets.randbits(52), next(self._seq), pending.agent, base, ops, pending.combine
        )
        self._queue(again)
        await self._send_pending(again)


def _combined(ops: list[Change], table: PolicyTable) -> frozenset[tuple[str, ...]]:
    """Paths whose policy combines equal concurrent writes (see ``resolvers.counter``)."""
    return frozenset(
        op.path for op in ops if getattr(table.policy_for(op.path), "sees_equal_writes", False)
    )


@contextlib.asynccontextmanager
async def connect(
    url: str,
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

    ``token`` is an access token (sent as the ``token`` query parameter);
    ``local`` a SQLite file keeping the replica and queued merges across
    restarts; ``resolvers``/``default`` the client's own conflict policies;
    ``schema`` a pydantic model: branch writes are validated against it and
    :meth:`RemoteState.model` reads the room typed.
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
