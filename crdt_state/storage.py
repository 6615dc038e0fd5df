"""Durable states on a SQLite file: journal, group commit, compaction, history.

``SharedState.open(path, **options)`` calls :func:`open_state`. The file holds
a snapshot (one Yjs update) and an append-only log of every change after it
(the exact Yjs update of each merge or received update, with its token, agent,
paths and time), a blame index and the conflict audit log; see
:mod:`crdt_state.storage_sqlite` for the format.

Durability. Each change is recorded under the state lock, in order, and a
single writer thread commits everything queued in ONE SQLite transaction
(group commit): concurrent merges share a commit and an fsync. A merge
returns once its transaction is committed, according to ``durability``:

- ``"full"`` (default): WAL with ``synchronous=FULL``; the commit is fsynced
  before the merge returns. Survives process crashes and power loss.
- ``"normal"``: WAL with ``synchronous=NORMAL``; the merge returns once the
  commit is written to the operating system, without fsync. Survives a crash
  of the process; the last merges can be lost if the machine loses power.
- ``"off"``: merges return without waiting; commits are not fsynced. Fast; a
  crash loses the changes not yet written (at most a fraction of a second).

Whatever the mode, the file always holds a prefix of the state's history:
a change is never stored without every change before it.

Compaction. When the log is ``keep_history`` rows plus a margin long, the
writer folds the oldest rows into a new snapshot: it replays the old
snapshot and those rows into a fresh document, checks that the result has
exactly the recorded token, encodes it, checks that the encoding decodes to
the same content and token, and only then, in one transaction, inserts the
new snapshot and deletes the old snapshot and the folded rows. A failed check
leaves the file as it was.

Epochs. A Yjs document keeps a tombstone (about 12 bytes) for every map entry
ever overwritten, so a snapshot alone would still grow with the number of
merges. When compaction finds the encoded document more than 4 times (plus
64 KiB) the size of a fresh document holding the same content, it asks the
state to start a new epoch: the content is written into a fresh document
(new client id), recorded as the new snapshot, and every older log row is
dropped. So the file size follows the content plus the retained history, not
the number of merges ever made. Tokens and fork bases of earlier epochs become
stale (``StaleBase``; after a reopen, ``UnknownBase``). This only happens
while the document has not been shared in this session (``get_update``,
``apply_update``, ``subscribe``), and never with ``compact_document=False``
(the hub's rooms, whose clients keep replicas of the document).

History. :meth:`Store.history`, :meth:`Store.at`, :meth:`Store.blame` and
:meth:`Store.conflicts` answer from the file. ``at(token)`` is exact for the
snapshot's token and every token of the retained log; older tokens raise
:class:`StaleBase`.

Client ids. A reopened state writes with a NEW random Yjs client id. The
state tells its listeners about a merge before the merge is durable (a sync
hub holds the update back until ``when_durable`` says so, but other listeners
may not), so after a crash some updates of the old client id may live on
other replicas and not in the file; reusing that id would create two
different operations with the same id (replicas would diverge). A fresh id
per opening costs one entry in the version vector per opening. For the same
reason an explicit ``client_id`` that already has changes in the file is
refused.

Concurrency between processes. The writer connection uses SQLite's
``locking_mode=EXCLUSIVE``: one process (one connection) owns the file while
it is open; a second :func:`open_state` on the same file, in this or another
process, raises :class:`StorageError` at once. The lock is released when the
state is closed or the process dies.
"""

from __future__ import annotations

import atexit
import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pycrdt import Doc

from . import storage_sqlite as sql
from .conflicts import Conflict
from .document import doc_from_content, doc_read, doc_snapshot
from .errors import INTERRUPTS, StaleBase, StorageError, UnknownBase
from .paths import Path, related
from .requests import RequestKey
from .values import MISSING, same
from .version import VersionVector

if TYPE_CHECKING:
    from .state import SharedState, StateUpdate

__all__ = ["BlameEntry", "ConflictRecord", "HistoryEntry", "Store", "open_state"]

S = TypeVar("S", bound="SharedState")

DEFAULT_KEEP_HISTORY: Final = 1_000
DEFAULT_KEEP_CONFLICTS: Final = 10_000


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One stored change: the state's ``token`` after it, who made it and what it wrote.

    ``origin`` is ``"local"`` for merges and ``"remote"`` for received updates;
    ``seq`` is its position in the state's history (1 = first change).
    """

    seq: int
    token: VersionVector
    agent: str | None
    paths: tuple[Path, ...]
    time: float
    origin: str


@dataclass(frozen=True, slots=True)
class BlameEntry:
    """The last change of a path: ``path`` is the path that change actually wrote
    (the path asked about, an ancestor or a descendant of it)."""

    path: Path
    agent: str | None
    time: float
    token: VersionVector
    seq: int


@dataclass(frozen=True, slots=True)
class ConflictRecord:
    """One audited conflict and how it was settled.

    ``base``/``current``/``incoming``/``resolution`` are as in :class:`Conflict`
    (:data:`MISSING` = absent, :data:`UNRESOLVED` = no policy settled it);
    ``applied`` is false when the merge was refused (nothing written);
    ``token`` is the state's version after the merge (or at the refusal).
    """

    path: Path
    base: Any
    current: Any
    incoming: Any
    current_agent: str | None
    incoming_agent: str | None
    policy: str | None
    resolution: Any
    applied: bool
    token: VersionVector
    time: float

    @property
    def same_value(self) -> bool:
        """True when both sides wrote the same value (see :attr:`Conflict.same_value`)."""
        return same(self.incoming, self.current)

    @property
    def agents(self) -> tuple[str | None, str | None]:
        """``(current_agent, incoming_agent)``."""
        return (self.current_agent, self.incoming_agent)


@dataclass(frozen=True, slots=True)
class _Audit:
    conflicts: tuple[Conflict, ...]
    token: VersionVector
    time: float


@dataclass(frozen=True, slots=True)
class _Request:
    """An applied request that wrote nothing (no change row carries it)."""

    key: RequestKey
    token: VersionVector
    seq: int
    clean: bool


_open_stores: weakref.WeakSet[Store] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:  # flush what "off"/"normal" states still queue
    for store in list(_open_stores):
        store.close()


class Store:
    """The journal and history of one durable state (one open SQLite file).

    Implements the ``Journal`` protocol of :mod:`crdt_state.state`:
    :meth:`record` is called under the state lock, in order, and returns a
    ticket; :meth:`wait` blocks until that ticket is committed (per the
    durability mode). After a write failure every later ``record``/``wait``
    raises :class:`StorageError`: changes made in memory since are not stored.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        file: str,
        *,
        durability: sql.Durability,
        last_seq: int,
        log_rows: int,
        keep_history: int,
        keep_conflicts: int | None,
        compact_document: bool = True,
    ) -> None:
        self.file = file
        self.compact_document = compact_document
        self.epochs = 0
        self._state: weakref.ReferenceType[SharedState] | None = None
        self.durability = durability
        self.keep_history = keep_history
        self.keep_conflicts = keep_conflicts
        self.compactions = 0
        self.last_compaction_error: StorageError | None = None
        self._conn = conn
        self._db = threading.Lock()  # guards the connection
        self._lock = threading.Lock()  # guards the queue and the counters below
        self._work = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._queue: list[tuple[int, StateUpdate | _Audit | _Request]] = []
        self._callbacks: list[tuple[int, Callable[[BaseException | None], None]]] = []
        self._issued = 0
        self._durable = 0
        self._settled = 0  # tickets whose commit and the compaction after it are done
        self._failed: StorageError | None = None
        self._closing = False
        self._closed = False
        self._last_seq = last_seq
        self._log_rows = log_rows
        self._margin = max(64, keep_history // 4)
        self._thread = threading.Thread(target=self._run, name="crdt-state-writer", daemon=True)
        self._thread.start()
        _open_stores.add(self)

    # -- Journal -------------------------------------------------------------------
    def record(self, change: StateUpdate) -> int:
        """Queue ``change`` for the next group commit; return its ticket."""
        return self._enqueue(change)

    def audit(self, conflicts: Sequence[Conflict], token: VersionVector) -> None:
        """Queue conflicts of a merge that wrote nothing (refused, or kept the current value)."""
        self._enqueue(_Audit(tuple(conflicts), token, time.time()))

    def remember_request(self, key: RequestKey, token: VersionVector, seq: int, clean: bool) -> int:
        """Queue an applied request that wrote nothing (``seq``: the head then); a ticket."""
        return self._enqueue(_Request(key, token, seq, clean))

    def _enqueue(self, item: StateUpdate | _Audit | _Request) -> int:
        with self._lock:
            if self._failed is not None:
                raise StorageError(
                    "the state file failed earlier; this change is not stored",
                    details={"file": self.file, "cause": self._failed.message},
                )
            if self._closing:
                raise StorageError(
                    "the durable state is closed; this change is not stored (reopen the file)",
                    details={"file": self.file},
                )
            self._issued += 1
            self._queue.append((self._issued, item))
            self._work.notify()
            return self._issued

    def wait(self, ticket: int) -> None:
        """Return once ``ticket`` is committed (at once with ``durability="off"``)."""
        if self.durability == "off":
            if self._failed is not None:
                raise self._failure()
            return
        self._wait(ticket)

    def on_durable(self, ticket: int, done: Callable[[BaseException | None], None]) -> None:
        """Call ``done(None)`` once ``ticket`` is committed, ``done(error)`` if it never will be.

        ``done`` runs on the writer thread (or at once, on the caller's). With
        ``durability="off"`` it is called at once.
        """
        with self._lock:
            if self.durability == "off" or self._durable >= ticket:
                error = self._failure() if self._failed is not None else None
            elif self._failed is not None:
                error = self._failure()
            else:
                self._callbacks.append((ticket, done))
                return
        done(error)

    def _fire(self, failed: bool) -> None:
        """Run the callbacks whose tickets are now durable (all of them on failure)."""
        with self._lock:
            if failed:
                ready, self._callbacks = self._callbacks, []
            else:
                ready = [(t, cb) for t, cb in self._callbacks if t <= self._durable]
                self._callbacks = [(t, cb) for t, cb in self._callbacks if t > self._durable]
            error = self._failure() if failed else None
        for _, callback in ready:
            callback(error)

    def _wait(self, ticket: int, settled: bool = False) -> None:
        """Wait until ``ticket`` is durable (``settled``: and compacted after, if due)."""
        with self._lock:
            while self._reached(ticket, settled) is False and self._failed is None:
                self._done.wait()
            if not self._reached(ticket, settled):
                raise self._failure()

    def _reached(self, ticket: int, settled: bool) -> bool:
        return (self._settled if settled else self._durable) >= ticket

    def _failure(self) -> StorageError:
        cause = self._failed.message if self._failed is not None else "closed"
        return StorageError(
            "the change could not be stored", details={"file": self.file, "cause": cause}
        )

    def last_ticket(self) -> int:
        """The ticket of the newest change queued so far (0 when none)."""
        with self._lock:
            return self._issued

    def flush(self) -> None:
        """Wait until everything recorded so far is committed, whatever the durability,
        and any compaction those commits started has finished (queries read a settled file).

        Raises :class:`StorageError` once the store is closed (for the queries).
        """
        with self._lock:
            if self._closed:
                raise StorageError("the durable state is closed", details={"file": self.file})
            ticket = self._issued
        self._wait(ticket, settled=True)

    # -- the writer thread ----------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._work.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                with self._db:
                    self._commit(batch)
            except BaseException as exc:
                error = exc if isinstance(exc, StorageError) else None
                with self._lock:
                    self._failed = error or StorageError(
                        f"writing the state file failed: {exc}", details={"file": self.file}
                    )
                    self._done.notify_all()
                self._fire(failed=True)
                return
            with self._lock:
                self._durable = batch[-1][0]
                self._done.notify_all()
            if self._callbacks:
                self._fire(failed=False)
            if self._log_rows > self.keep_history + self._margin:
                self._compact()
            with self._lock:
                self._settled = batch[-1][0]
                self._done.notify_all()

    def _commit(self, batch: list[tuple[int, StateUpdate | _Audit | _Request]]) -> None:
        """Write one group of queued changes in one transaction (executemany per table)."""
        last_seq = self._last_seq
        added = 0
        rows: list[sql.ChangeRow] = []
        reset = False
        with sql.transaction(self._conn):
            for _, item in batch:
                if isinstance(item, _Audit):
                    applied = all(c.resolved for c in item.conflicts)
                    token = item.token.to_state()
                    sql.append_conflicts(self._conn, item.conflicts, token, item.time, applied)
                    continue
                if isinstance(item, _Request):
                    sql.append_changes(self._conn, rows)  # keep the order of the requests
                    rows = []
                    key = item.key
                    sql.remember_request(
                        self._conn,
                        key.writer,
                        key.request_id,
                        item.seq,
                        item.token.to_state(),
                        item.clean,
                    )
                    continue
                if item.seq != last_seq + 1:
                    raise StorageError(
                        "the state and its file disagree on the change sequence",
                        details={"file": self.file, "expected": last_seq + 1, "got": item.seq},
                    )
                token = item.token.to_state()
                last_seq = item.seq
                if item.origin == "reset":  # a new epoch: its document is the whole history
                    sql.append_changes(self._conn, rows)
                    rows = []
                    sql.restart_at(self._conn, item.seq, token, item.update)
                    added = -self._log_rows
                    self.epochs += 1
                    reset = True
                    continue
                rows.append(
                    sql.ChangeRow(
                        item.seq,
                        token,
                        item.update,
                        item.agent,
                        item.origin,
                        item.time,
                        item.paths,
                        item.request_id,
                        item.writer,
                        not item.conflicts,
                    )
                )
                if item.conflicts:
                    sql.append_conflicts(self._conn, item.conflicts, token, item.time, True)
                added += 1
            sql.append_changes(self._conn, rows)
        self._last_seq = last_seq
        self._log_rows += added
        if reset:
            sql.release_free_pages(self._conn)

    def _compact(self) -> None:
        """Fold all but the newest ``keep_history`` log rows into a new snapshot."""
        fold = self._last_seq - self.keep_history
        try:
            with self._db:
                stored = sql.load(self._conn, upto=fold)
            if not stored.rows:
                return
            doc = _replay(stored)
            content = doc_snapshot(doc)
            token = stored.rows[-1].token
            encoded = bytes(doc.get_update())
            check = _replay(sql.Stored(fold, token, encoded, []))
            if doc_snapshot(check) != content:
                raise StorageError("a compacted snapshot does not decode to the same content")
            with self._db:
                written = sql.blame_paths_upto(self._conn, fold)
                gone = [p for p in written if doc_read(doc, p) is MISSING]
                sql.swap_snapshot(self._conn, fold, token, encoded, gone, self.keep_conflicts)
                self._log_rows = sql.count_log(self._conn)
            self.compactions += 1
            if (
                self.compact_document
                and len(encoded) > _TOMBSTONE_FACTOR * _fresh_size(content) + _TOMBSTONE_SLACK
            ):
                state = self._state() if self._state is not None else None
                if state is not None:
                    state._reset_document()
        except Exception as exc:  # the file is unchanged: keep going without compacting
            self.last_compaction_error = (
                exc if isinstance(exc, StorageError) else StorageError(f"compaction failed: {exc}")
            )
            self._margin *= 2  # do not retry on every commit

    # -- history ---------------------------------------------------------------------
    def history(
        self,
        *,
        agent: str | None = None,
        path: Any = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]:
        """Retained changes, oldest first.

        Filters: ``agent``; ``path`` (changes that wrote it, an ancestor or a
        descendant); ``since``/``until`` (times, inclusive); ``limit`` keeps
        the newest ``limit`` matches.
        """
        from .paths import parse_path

        wanted = parse_path(path) if path is not None else None
        self.flush()
        with self._db:
            rows = sql.history_rows(self._conn, agent, since, until)
        out = [
            HistoryEntry(
                seq=r.seq,
                token=VersionVector.from_state(r.token),
                agent=r.agent,
                paths=r.paths,
                time=r.time,
                origin=r.origin,
            )
            for r in rows
            if wanted is None or any(related(p, wanted) for p in r.paths)
        ]
        return out[-limit:] if limit is not None else out

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token``.

        Exact for the oldest retained version (the snapshot) and every token of
        the retained history. :class:`StaleBase` for a version compacted away;
        :class:`UnknownBase` for a token this state never had.
        """
        if not isinstance(token, VersionVector):
            raise TypeError("at() takes a VersionVector")
        self.flush()
        with self._db:
            seq = sql.seq_of_token(self._conn, token.to_state())
            if seq is None:
                oldest = VersionVector.from_state(sql.load(self._conn, upto=0).snapshot_token)
            else:
                stored = sql.load(self._conn, upto=seq)
        if seq is None:
            if token <= oldest:
                raise StaleBase(
                    "this version is older than the retained history (compacted away)",
                    details={"token": str(token), "oldest": str(oldest)},
                )
            raise UnknownBase(
                "this state never had exactly this version", details={"token": str(token)}
            )
        return doc_snapshot(_replay(stored))

    def blame(self, path: Path) -> BlameEntry | None:
        """The newest change that wrote ``path``, an ancestor or a descendant; None if none."""
        self.flush()
        with self._db:
            found = sql.blame_row(self._conn, path)
        if found is None:
            return None
        written, seq, agent, when, token = found
        return BlameEntry(
            path=written, agent=agent, time=when, token=VersionVector.from_state(token), seq=seq
        )

    def conflicts(
        self, path: Path | None = None, since: float | None = None
    ) -> list[ConflictRecord]:
        """Audited conflicts, oldest first, at or below ``path``, from time ``since``."""
        self.flush()
        with self._db:
            rows = sql.conflict_rows(self._conn, path, since)
        return [
            ConflictRecord(
                path=sql.decode_path(r[0]),
                base=sql.decode_value(r[1]),
                current=sql.decode_value(r[2]),
                incoming=sql.decode_value(r[3]),
                current_agent=r[4],
                incoming_agent=r[5],
                policy=r[6],
                resolution=sql.decode_value(r[7]),
                applied=bool(r[8]),
                token=VersionVector.from_state(r[9]),
                time=r[10],
            )
            for r in rows
        ]

    # -- closing ----------------------------------------------------------------------
    def close(self) -> None:
        """Commit everything queued, checkpoint the WAL and release the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing = True
            self._work.notify()
        self._thread.join()
        if self._callbacks:  # tickets the writer never committed
            self._fire(failed=True)
        _open_stores.discard(self)
        if self._failed is None and self._log_rows > self.keep_history + self._margin:
            self._compact()  # the writer is gone: leave a compact file behind
        with self._db:
            try:
                if self._failed is None:
                    sql.checkpoint(self._conn)
            except sqlite3.Error:
                pass  # the WAL stays; the next opening recovers it
            finally:
                self._conn.close()

    @property
    def closed(self) -> bool:
        return self._closed


_TOMBSTONE_FACTOR: Final = 4
_TOMBSTONE_SLACK: Final = 64 * 1024


def _fresh_size(content: dict[str, Any]) -> int:
    """The encoded size of a document holding ``content`` and nothing else."""
    return len(doc_from_content(content).get_update())


def _version(doc: Doc[Any]) -> VersionVector:
    return VersionVector.from_state(doc.get_state())


def _replay(stored: sql.Stored) -> Doc[Any]:
    """A fresh document holding the snapshot plus the rows, each row's token checked."""
    doc: Doc[Any] = Doc()
    try:
        doc.apply_update(stored.snapshot)
        if _version(doc) != VersionVector.from_state(stored.snapshot_token):
            raise StorageError("the state file is damaged: the snapshot does not match its token")
        for row in stored.rows:
            doc.apply_update(row.update)
            if _version(doc) != VersionVector.from_state(row.token):
                raise StorageError(
                    "the state file is damaged: a change does not match its token",
                    details={"seq": row.seq},
                )
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(f"the state file is damaged: {exc}") from exc
    except BaseException as exc:  # PanicException from the Rust core
        if isinstance(exc, INTERRUPTS):
            raise
        raise StorageError(f"the state file is damaged: {exc}") from exc
    return doc


def open_state(
    cls: type[S],
    path: str | os.PathLike[str],
    *,
    durability: sql.Durability = "full",
    keep_history: int = DEFAULT_KEEP_HISTORY,
    keep_conflicts: int | None = DEFAULT_KEEP_CONFLICTS,
    compact_document: bool = True,
    **options: Any,
) -> S:
    """Create or reopen the state stored in the SQLite file at ``path``.

    Args:
        cls: :class:`SharedState` or a subclass.
        path: the file; created when missing (its directory must exist).
        durability: ``"full"``, ``"normal"`` or ``"off"`` (see the module doc).
        keep_history: how many recent changes stay in the log for
            :meth:`~SharedState.history`, :meth:`~SharedState.at` and for
            judging old fork bases after a reopen; older ones are compacted.
        keep_conflicts: how many audit-log rows are kept (``None``: all).
        compact_document: let compaction rebuild the Yjs document from its
            content once tombstones of overwritten entries dominate it (a new
            epoch; earlier tokens become stale). Only done while the document
            has not been shared in this session (no ``get_update``,
            ``apply_update`` or ``subscribe``); turn it off for a state whose
            Yjs updates other replicas keep across sessions (the hub does).
        options: the :class:`SharedState` constructor's (``resolvers``,
            ``default``, ``history``, ``client_id``, ``schema``, ``initialize``).
            On reopening, schema defaults are not written again.

    Reopening restores content and token exactly. Raises :class:`StorageError`
    for a foreign, damaged, newer or already open file (the file is untouched).
    """
    if keep_history < 1:
        raise ValueError("keep_history must be at least 1")
    if keep_conflicts is not None and keep_conflicts < 0:
        raise ValueError("keep_conflicts must be >= 0 or None")
    file = os.fspath(path)
    conn, is_new = sql.connect(file, durability)
    try:
        settings: dict[str, Any] = {
            "durability": durability,
            "keep_history": keep_history,
            "keep_conflicts": keep_conflicts,
            "compact_document": compact_document,
        }
        if is_new:
            state, store = _create(cls, conn, file, settings, options)
        else:
            state, store = _reopen(cls, conn, file, settings, options)
    except BaseException:
        conn.close()
        raise
    state._attach(store)
    store._state = weakref.ref(state)
    return state


def _create(
    cls: type[S],
    conn: sqlite3.Connection,
    file: str,
    settings: dict[str, Any],
    options: dict[str, Any],
) -> tuple[S, Store]:
    state = cls(**options)  # schema defaults, if any, become part of the first snapshot
    with state._lock:
        seq = state._log.head_seq
        token = state.token
        blame = [
            (p, e.seq, e.agent, e.time, e.token.to_state())
            for e in state._log.entries()
            for p in e.writes
        ]
        snapshot = bytes(state._doc.get_update())  # not get_update(): that shares the doc
    try:
        sql.create(conn, seq, token.to_state(), snapshot, blame)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot create the state file: {exc}", details={"file": file}) from exc
    store = Store(conn, file, last_seq=seq, log_rows=0, **settings)
    return state, store


def _reopen(
    cls: type[S],
    conn: sqlite3.Connection,
    file: str,
    settings: dict[str, Any],
    options: dict[str, Any],
) -> tuple[S, Store]:
    try:
        stored = sql.load(conn)
    except sqlite3.Error as exc:
        raise StorageError(f"the state file is damaged: {exc}", details={"file": file}) from exc
    head = VersionVector.from_state(stored.rows[-1].token if stored.rows else stored.snapshot_token)
    client_id = options.get("client_id")
    if client_id is not None and head.get_clock(int(client_id)) > 0:
        raise StorageError(
            "this client id already wrote to the file; reusing it is unsafe "
            "(some of its updates may exist elsewhere but not here): omit client_id",
            details={"file": file, "client_id": client_id},
        )
    if client_id is None:
        client_id = _fresh_client_id(head)
    state = cls(**{**options, "client_id": client_id, "initialize": False})
    changes = [(r.update, r.agent, r.origin, r.time) for r in stored.rows]
    try:
        tokens = state._restore(stored.snapshot, stored.snapshot_seq, changes)
    except Exception as exc:
        raise StorageError(
            f"the state file is damaged: its updates do not decode ({exc})", details={"file": file}
        ) from exc
    except BaseException as exc:  # PanicException from the Rust core
        if isinstance(exc, INTERRUPTS):
            raise
        raise StorageError(
            f"the state file is damaged: its updates do not decode ({exc})", details={"file": file}
        ) from exc
    expected = [VersionVector.from_state(r.token) for r in stored.rows]
    if tokens != expected or state.token != head:
        raise StorageError(
            "the state file is damaged: replaying it does not give the recorded versions",
            details={"file": file, "head": str(head), "restored": str(state.token)},
        )
    made_by: dict[int, RequestKey] = {}
    for row in sql.recent_requests(conn):
        key = RequestKey(row.writer, row.request_id)
        state._requests.remember(key, VersionVector.from_state(row.token), row.paths, row.clean)
        if row.paths:  # a request that wrote nothing made no change
            made_by[row.seq] = key
    for entry in state._log.entries():  # chains of these requests judge like before the restart
        entry.request = made_by.get(entry.seq)
    store = Store(
        conn,
        file,
        last_seq=stored.snapshot_seq + len(stored.rows),
        log_rows=len(stored.rows),
        **settings,
    )
    return state, store


def _fresh_client_id(token: VersionVector) -> int:
    while True:
        candidate = random.getrandbits(32)
        if candidate and candidate not in token:
            return candidate
