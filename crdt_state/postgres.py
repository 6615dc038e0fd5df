"""The PostgreSQL store: many durable states (rooms) in one database, one ``key`` each.

:class:`PostgresStore` implements :class:`crdt_state.journal.StateStore` like
:class:`crdt_state.storage.SqliteStore` does, with the same semantics (group commit by one
writer thread, compaction, epochs, history, ``at``, blame, the audit log, remembered
requests); :func:`open_postgres` opens a :class:`~crdt_state.SharedState` on one.
:mod:`crdt_state._pg_schema` describes the tables. Needs psycopg 3 (``pip install
'crdt-state[cluster]'``); ``import crdt_state`` does not.

One writer per key: without a ``before_commit`` hook the store holds a
session advisory lock on its key, so a second writer (any process) is refused
with :class:`StorageError`; with a hook the caller guarantees it (the hub
cluster checks its fencing number inside every write transaction).
``read_only=True`` opens without any lock, for replicas that only load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - the optional dependency is installed in tests
    raise ImportError(
        "crdt_state.postgres needs psycopg 3: pip install 'crdt-state[cluster]'"
    ) from exc

from . import _pg_log as pglog
from . import _pg_schema as pgschema
from . import _pg_takeover as pgtakeover
from ._group_rounds import Steps
from ._pg_connect import (
    Durability,
    check_options,
    connect,
    failures,
    hook_refused,
    prepare,
    release,
    run_hook,
    safe_dsn,
)
from ._pg_fold import FoldedCheck
from ._pg_reads import PgReads, compact
from ._pg_shared import CheckHooks, Recorded, SharedWriter
from ._pg_shared import Hook as WriterHook
from ._pg_writer import stage_batch, write_batch
from ._queued_items import Item, Written
from ._queued_store import QueuedStore
from .errors import ReadOnlyStore, StorageError
from .journal import BlameEntry, StoredState
from .model_type import SchemaT
from .progress import ProgressLog
from .state import SharedState
from .version import VersionVector

__all__ = [
    "PG_STORE_OPTIONS",
    "BeforeCommit",
    "CheckHooks",
    "FoldedCheck",
    "PostgresStore",
    "Recorded",
    "SharedWriter",
    "WriterHook",
    "load_stored",
    "open_postgres",
    "safe_dsn",
]

BeforeCommit = Callable[["psycopg.Connection[Any]", int], None]
"""``before_commit(conn, last_ticket)``: runs inside every write transaction, last.

``last_ticket`` is the newest ticket the transaction stores (for a compaction,
the newest ticket already committed; 0 when creating the state). Raising rolls the
transaction back and fails the store (see :class:`PostgresStore`).
"""
PG_STORE_OPTIONS: Final = ("durability", "keep_history", "keep_conflicts", "compact_document",
    "before_commit", "lock", "read_only", "connect_timeout", "writer")  # fmt: skip
"""The keyword options of :meth:`PostgresStore.open` (:func:`open_postgres` passes them on)."""


class PostgresStore(QueuedStore):
    """The journal and history of one durable state: one ``key`` in a PostgreSQL database.

    Items are queued under the state's lock, in order, each with a ticket; the
    writer thread stores everything queued in one transaction, which calls
    ``before_commit(conn, last_ticket)`` last. A ticket is durable once its
    transaction committed. After a failed write (PostgreSQL down, the hook
    raised, the transaction refused) every later call raises
    :class:`StorageError`, whose ``__cause__`` is the original error: changes
    made in memory since are not stored, and nothing of the failed
    transaction is.

    With a ``writer`` (a :class:`SharedWriter`), the store has no writer thread: the
    writer's thread records each batch as statements and stores it in a transaction
    shared with other stores' batches (the hook runs there first, on the writer's
    connection; a batch it refuses fails this store alone); the store's own
    connection then serves loading, queries and compaction.
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        key: str,
        where: str,
        *,
        durability: Durability = "full",
        keep_history: int = 1_000,
        keep_conflicts: int | None = 10_000,
        compact_document: bool = True,
        before_commit: BeforeCommit | None = None,
        read_only: bool = False,
        writer: SharedWriter | None = None,
    ) -> None:
        self.key = key
        self.writer = writer
        self.where = where
        self._conn = conn
        self._db = threading.Lock()  # guards the connection
        self._reads = PgReads(conn, key, self._db, where)
        self.durability = durability
        self.before_commit = before_commit
        self.read_only = read_only
        self._refused: Exception | None = None  # what the hook raised on a compaction
        self._stored_ticket = 0  # the newest ticket committed (what compactions pass the hook)
        self._set_up = False  # a reader's connection set up as a writer's (get_ready)
        super().__init__(
            where,
            durability=durability,
            keep_history=keep_history,
            keep_conflicts=keep_conflicts,
            compact_document=compact_document,
        )
        if writer is not None:
            self._write_in_rounds(writer)

    @classmethod
    def open(
        cls,
        dsn: str,
        key: str,
        *,
        durability: Durability = "full",
        keep_history: int = 1_000,
        keep_conflicts: int | None = 10_000,
        compact_document: bool = True,
        before_commit: BeforeCommit | None = None,
        lock: bool | None = None,
        read_only: bool = False,
        connect_timeout: float = 5.0,
        writer: SharedWriter | None = None,
    ) -> PostgresStore:
        """Connect to the database of ``dsn`` and open the state stored under ``key``.

        The store's tables are created or migrated first (not with ``read_only``).

        Args:
            dsn: a libpq connection string or URL.
            key: the state's name in the shared tables (a room name); any non-empty text.
            durability: ``"full"`` (commit waits for PostgreSQL's WAL flush),
                ``"normal"`` (``synchronous_commit=off``: a server crash may lose
                the last commits) or ``"off"`` (merges do not wait).
            keep_history: changes kept in the log after compaction (as :meth:`SqliteStore.open`).
            keep_conflicts: audited conflicts kept (``None``: all), as SQLite.
            compact_document: allow new epochs when tombstones dominate, as SQLite.
            before_commit: ``before_commit(conn, last_ticket)``, run inside every
                write transaction before it commits (see :data:`BeforeCommit`).
            lock: hold a session advisory lock on ``key`` so a second writer is
                refused; default: only when there is no ``before_commit`` hook.
            read_only: load and query only (no lock, no migration); writes raise.
            connect_timeout: seconds to wait for the server.
            writer: store each batch through this shared writer (one transaction for the
                batches of many stores); ``durability`` must be the writer's.

        Raises:
            StorageError: the server does not answer (``details["reason"]`` is
                ``"unavailable"``; the message names the DSN without its password),
                another writer holds ``key`` (``"in_use"``), or the tables are newer.
        """
        check_options(key, durability, keep_history, keep_conflicts)
        if writer is not None and (writer.durability != durability or read_only):
            raise ValueError("a writer needs a writable store of the writer's durability")
        where = f"{safe_dsn(dsn)}#{key}"
        conn = connect(dsn, where, connect_timeout)
        locked = lock if lock is not None else before_commit is None
        prepare(conn, key, where, durability=durability, lock=locked, read_only=read_only)
        return cls(
            conn,
            key,
            where,
            durability=durability,
            keep_history=keep_history,
            keep_conflicts=keep_conflicts,
            compact_document=compact_document,
            before_commit=before_commit,
            read_only=read_only,
            writer=writer,
        )

    @property
    def name(self) -> str:
        """``postgresql://user@host:port/dbname#key`` (never the password)."""
        return self.where

    # -- opening a state -------------------------------------------------------------
    def load(self) -> StoredState | None:
        """The snapshot, log and remembered requests of the key; ``None`` for a new key."""
        with self._db, self._failures("cannot read the stored state"):
            if self.read_only and pgschema.schema_version(self._conn) == 0:
                return None
            with self._conn.transaction():
                if not pglog.exists(self._conn, self.key):
                    return None
                stored = pglog.load(self._conn, self.key)
                requests = pglog.recent_requests(self._conn, self.key)
        self._last_seq = stored.snapshot_seq + len(stored.changes)
        self._log_rows = len(stored.changes)
        self._ready = True
        return StoredState(
            stored.snapshot_seq, stored.snapshot_token, stored.snapshot, stored.changes, requests
        )

    def get_ready(self) -> None:
        """Set a ``read_only`` store's connection up as a writer's, ahead of :meth:`take_writes`.

        The tables are checked (or migrated) and the commit mode set; it still only reads.
        """
        with self._db:
            if self.read_only and not self._set_up:
                pgtakeover.get_ready(self._conn, self.where, self.durability)
                self._set_up = True

    def take_writes(
        self,
        before_commit: BeforeCommit | None,
        *,
        lock: bool | None = None,
        setup: Callable[[psycopg.Connection[Any]], None] | None = None,
        writer: SharedWriter | None = None,
    ) -> StoredState:
        """Make this ``read_only`` store, which loaded its key, the key's writer.

        After :meth:`get_ready` (called here if not yet), one round trip: ``setup(conn)``,
        the lock if ``lock`` (default: without ``before_commit``), and one transaction
        reading what was committed since :meth:`load`. From then on the store takes
        writes, each checked by ``before_commit``, and stored through ``writer`` when
        given (as :meth:`open`'s ``writer``; it must have the store's durability).

        Returns:
            The log rows after the loaded ones (``changes``) and the newest remembered
            requests; no ``snapshot``.

        Raises:
            StorageError: not a loaded read-only store, the rows after the loaded ones were
                folded into a newer snapshot (``"reload"``: open the key afresh), or as
                :meth:`open`. The store then stays read-only.
        """
        if not (self.read_only and self._ready):
            raise StorageError(
                "only a read_only store that loaded its key can take writes",
                details={"database": self.where, "reason": "not_read_only"},
            )
        if writer is not None and writer.durability != self.durability:
            raise ValueError("a writer needs a writable store of the writer's durability")
        self.get_ready()
        locked = lock if lock is not None else before_commit is None
        with self._db:
            newer, requests, rows = pgtakeover.take_writes(
                self._conn, self.key, self.where, self._last_seq, locked, setup
            )
            first = self._last_seq
            self._last_seq, self._log_rows = first + len(newer), rows
            self.before_commit = before_commit
            self.writer = writer
            if writer is not None:
                self._write_in_rounds(writer)
            self.read_only = False
        return StoredState(first, VersionVector(), b"", newer, requests)

    def create(self, initial: StoredState, blame: Sequence[BlameEntry]) -> None:
        """Store the first snapshot of a new key (and the blame of its changes)."""
        self._writable()
        rows = [(b.path, b.seq, b.agent, b.time, b.token.to_state()) for b in blame]
        token = initial.snapshot_token.to_state()
        failures = self._failures("cannot create the stored state")
        with self._db, failures, self._conn.transaction():
            pglog.create(self._conn, self.key, initial.snapshot_seq, token, initial.snapshot, rows)
            self._hook(self._conn, 0)
        self._last_seq = initial.snapshot_seq
        self._ready = True

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStore(
                "this store was opened read_only: it stores nothing",
                details={"database": self.where, "reason": "read_only"},
            )

    # -- the writer thread ---------------------------------------------------------------
    def _write(self, batch: list[tuple[int, Item]]) -> None:
        """Store one group of queued items in one transaction (without a shared writer).

        One pipeline carries the whole transaction (its statements go out together,
        not one round trip each), the hook last.
        """
        self._check_refused()
        ticket, items, conn = batch[-1][0], [item for _, item in batch], self._conn
        failed = self._failures("writing to PostgreSQL failed")
        with self._db, failed, conn.pipeline(), conn.transaction():
            written = write_batch(conn, self.key, items, self._last_seq, self._log_rows, self.where)
            self._hook(conn, ticket)
        self._written(written, ticket)

    def _stage(self, batch: list[tuple[int, Item]]) -> Steps:
        """The batch as statements for the shared writer's round (see :class:`SharedWriter`)."""
        self._check_refused()
        at, hook = (self._last_seq, self._log_rows), self.before_commit
        written = yield from stage_batch(self.key, batch, at, hook, self.where)
        self._written(written, batch[-1][0])

    def _check_refused(self) -> None:
        if self._refused is not None:  # the hook refused a compaction: refuse the same way
            raise hook_refused(self._refused, self.where) from self._refused

    def _written(self, written: Written, ticket: int) -> None:
        self._last_seq, self._log_rows = written.last_seq, written.log_rows
        self.epochs, self._stored_ticket = self.epochs + written.epochs, ticket

    def _hook(self, conn: psycopg.Connection[Any], ticket: int) -> None:
        if self.before_commit is not None:
            run_hook(self.before_commit, conn, ticket, self.where)

    def _fold(self, fold: int, progress: ProgressLog) -> bool | None:
        with self._db, self._failures("compaction failed"):
            stored = self._stored_ticket
            epoch_due = compact(
                self._conn,
                self.key,
                fold,
                self.keep_conflicts,
                lambda conn: self._hook(conn, stored),
                measure=self.compact_document,
                on_change=progress.advance,
            )
            if epoch_due is not None:
                self._log_rows = pglog.count_log(self._conn, self.key)
        return epoch_due

    def _compaction_failed(self, error: StorageError) -> None:
        cause = error.__cause__
        if error.details.get("reason") == "refused" and isinstance(cause, Exception):
            self._refused = cause  # a stale owner: its next write fails too

    def _failures(self, what: str) -> failures:
        return failures(what, self.where)

    def _release(self, ready: bool) -> None:
        """Close the connection (releasing the lock)."""
        with self._db:
            release(self._conn, locked=not self.read_only)


def load_stored(dsn: str, key: str, *, connect_timeout: float = 5.0) -> StoredState | None:
    """What the database holds for ``key`` (snapshot, log, requests), without any lock.

    For replicas (hub followers) that rebuild a room and never write it.

    Raises:
        StorageError: the server does not answer, or the stored state is damaged.
    """
    store = PostgresStore.open(dsn, key, read_only=True, connect_timeout=connect_timeout)
    try:
        return store.load()
    finally:
        store.close()


def open_postgres(
    dsn: str, key: str, *, schema: type[SchemaT] | None = None, **options: Any
) -> SharedState[SchemaT]:
    """Create or reopen the :class:`~crdt_state.SharedState` stored under ``key``.

    Args:
        dsn: the database (a libpq connection string or URL).
        key: the state's name in the shared tables.
        schema: as ``SharedState``'s (the state is typed by it).
        options: the store's (:data:`PG_STORE_OPTIONS`, see :meth:`PostgresStore.open`)
            and the constructor's.

    Raises:
        StorageError: as :meth:`PostgresStore.open` and ``SharedState.open_store``.
    """
    settings = {k: options.pop(k) for k in PG_STORE_OPTIONS if k in options}
    store = PostgresStore.open(dsn, key, **settings)
    return SharedState.open_store(store, schema=schema, **options)
