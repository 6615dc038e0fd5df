"""One PostgreSQL writer for many stores: their batches in one transaction.

A :class:`SharedWriter` owns one connection and one thread. A store opened with
``writer=`` hands its group commit to the writer
(:class:`~crdt_state._group_rounds.RoundCommit`): the store has no thread of its own.
The writer's thread runs **rounds**: it takes the batch of every store handed in so
far, turns each into the statements the store would run (:class:`Recorded`: nothing is
sent yet), and stores them all in **one** transaction; the stores handing theirs in
meanwhile go in the next round. :meth:`SharedWriter.commit` hands in one batch of
recorded statements directly and waits for its round. A round
(:func:`~crdt_state._pg_round.store_round`):

1. the stores' ``before_commit`` hooks first: all in one call of the writer's ``check``
   when it has one (the hub cluster checks every room's fence in one statement), else
   each hook in its own savepoint. A batch whose hook raises fails alone and writes
   nothing; the others go on. (A hook that locks a row to guard the commit, like the
   cluster's fence, holds that lock until the ``COMMIT``, wherever it runs in the
   transaction.)
2. the statements of the batches that passed, the same statement of every store sent
   as one ``executemany`` (each store's statements keep their order), so a transaction
   of many stores costs little more than one of a store;
3. one ``COMMIT``.

A batch fails alone: when a statement is refused (a constraint, a value, a row too large;
the connection still up), the transaction rolls back and the round runs once more, the
hooks again then each batch in a savepoint of its own: only the batches refused again
fail (:class:`StorageError`, ``details["reason"] == "rejected"``, with the store's
``"key"``, the ``"sqlstate"`` and the refusal as ``__cause__``), the others commit. A lost
connection (or a refused ``COMMIT`` of that retry) fails every batch of the round not
failed yet, with no retry: a ``COMMIT`` whose answer was lost may have stored its
batches. A store whose batch failed is failed for good, as after any failed write
(:class:`~crdt_state._group_commit.GroupCommit`): its later writes raise. Nobody is told a
batch is stored before the ``COMMIT`` holding it returned: the stores mark their batches
durable after it, and only then are their durability callbacks called (on the writer's
thread).

A lost connection is opened again for the next round. Knows SQL statements as text and
parameters, not the rows: the stores record them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from . import _writer_pool
from ._group_rounds import RoundCommit
from ._pg_connect import Durability, connect, prepare, safe_dsn
from ._pg_round import CheckHooks, Hook, Part, Recorded, store_round
from .errors import StorageError

__all__ = ["IDLE_SECONDS", "CheckHooks", "Hook", "Part", "Recorded", "SharedWriter"]

log = logging.getLogger("crdt_state.storage")

IDLE_SECONDS = 5.0
"""A writer's thread ends after this long without work (a writer never closed keeps none)."""


class SharedWriter:
    """One connection writing the batches of many stores (see the module doc).

    Args:
        dsn: the database (a libpq connection string or URL); its ``application_name``
            and ``options`` apply to the writer's session.
        durability: ``"full"`` or ``"normal"`` (``synchronous_commit`` of the session;
            stores opened on this writer must have the same).
        connect_timeout: seconds to wait for the server.
        check: runs the hooks of a round together (see :data:`CheckHooks`); without
            it each hook runs alone, in a savepoint.

    Raises:
        StorageError: the server does not answer, or its tables are newer.
    """

    def __init__(
        self,
        dsn: str,
        *,
        durability: Durability = "full",
        connect_timeout: float = 5.0,
        check: CheckHooks | None = None,
    ) -> None:
        self.dsn = dsn
        self.where = safe_dsn(dsn)
        self.durability = durability
        self.connect_timeout = connect_timeout
        self.check = check
        self.rounds = 0
        """Rounds run so far (a round run again is one round, two transactions)."""
        self.parts = 0
        """Batches those rounds carried."""
        self.retries = 0
        """Rounds run again, each batch in a savepoint of its own (a statement was refused)."""
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # something was handed in
        self._turn = threading.Condition(self._lock)  # a round ended
        self._ready: list[RoundCommit[Any]] = []  # stores with a batch for the next round
        self._pending: list[Part] = []  # batches handed in by commit()
        self._late: list[RoundCommit[Any]] = []  # stores handed in after close(): refused
        self._thread: int | None = None  # the writer's thread (None: not running)
        self._idle = False  # the thread waits for work
        self._busy = False  # a round is under way
        self._closing = False
        self._closed = False
        self._connected()  # fail now, not at the first write, when the server is not there

    @property
    def pid(self) -> int | None:
        """The server process of the writer's session now (``None`` while disconnected)."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    @property
    def waiting(self) -> int:
        """Batches handed in and not taken by a round yet."""
        with self._lock:
            return len(self._pending) + len(self._ready)

    def submit(self, queue: RoundCommit[Any]) -> None:
        """Take a batch of ``queue`` in the next round (any thread; never blocks for it).

        After :meth:`close` the batch is refused (``queue`` fails with :class:`StorageError`).
        """
        with self._lock:
            (self._late if self._closing else self._ready).append(queue)
            self._wake()

    def commit(self, statements: Recorded, hook: Hook | None, ticket: int, where: str) -> None:
        """Store one batch in the next round's transaction; returns once it committed.

        Args:
            statements: the batch's statements, in order.
            hook: the store's ``before_commit``, run first (``ticket`` is its argument).
            ticket: the newest ticket of the batch.
            where: the store, for messages.

        Raises:
            StorageError: the hook refused the batch (``details["reason"] == "refused"``,
                ``__cause__`` the hook's error: nothing of the batch is stored), a
                statement of it was refused (``"rejected"``, see the module doc), or the
                writer is closed.
            psycopg.Error: the connection was lost (nothing of the round is stored).
        """
        part = Part(statements, hook, ticket, where)
        with self._lock:
            if self._closing:
                raise self._refusal()
        error = self.commit_alone(part)
        if error is not None:
            raise error

    def commit_alone(self, part: Part) -> BaseException | None:
        """Store ``part`` in a round (of its own on the writer's thread); its error."""
        if threading.get_ident() == self._thread:  # a store closing in a callback
            self._round([part])
            return part.error
        with self._lock:
            self._pending.append(part)
            self._wake()
            while not part.done:
                self._turn.wait()
        return part.error

    def close(self) -> None:
        """Let the rounds of what was handed in end, then close the connection. Idempotent.

        Batches handed in later are refused (:class:`StorageError`).
        """
        with self._lock:
            self._closing = True
            while self._busy or self._pending or self._ready:
                self._turn.wait()
            self._closed = True
            if self._thread is not None:
                self._wake()  # it ends
        if self._conn is not None:
            self._conn.close()

    # -- the writer's thread ------------------------------------------------------------

    def _wake(self) -> None:
        """Start the writer's thread, or wake it when it waits (lock held)."""
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="crdt-state-pg-writer", daemon=True)
            thread.start()
            self._thread = thread.ident
        elif self._idle:
            self._work.notify()

    def _run(self) -> None:
        _writer_pool.as_writer_thread()
        try:
            self._serve()
        finally:  # ended (or failed): the next batch starts a thread again
            with self._lock:
                if self._thread == threading.get_ident():
                    self._thread = None

    def _serve(self) -> None:
        idle_for_long = False
        while True:
            with self._lock:
                while not (self._ready or self._pending or self._late):
                    if self._closed or idle_for_long:
                        return
                    self._idle = True
                    idle_for_long = not self._work.wait(IDLE_SECONDS)
                    self._idle = False
                idle_for_long = False
                queues, self._ready = self._ready, []
                direct, self._pending = self._pending, []
                late, self._late = self._late, []
                closed = self._closed
                if closed:  # handed in after close() ended: nothing is sent any more
                    late, queues = late + queues, []
                    for part in direct:
                        part.error = self._refusal()
                self._busy = True
            try:
                self._run_round(queues, [] if closed else direct, late)
            finally:
                with self._lock:
                    for part in direct:
                        part.done = True
                    self._busy = False
                    self._turn.notify_all()

    def _run_round(
        self, queues: list[RoundCommit[Any]], direct: list[Part], late: list[RoundCommit[Any]]
    ) -> None:
        """One round: stage the stores' batches, commit, end each, then the callbacks.

        The batches of ``late`` stores (handed in after :meth:`close`) are refused.
        """
        staged = [s for queue in queues if (s := queue.begin_round()) is not None]
        refused = [s for queue in late if (s := queue.begin_round()) is not None]
        parts: list[Part] = direct + [s.part for s in staged]
        if parts:
            self._round(parts)
        if direct:
            with self._lock:
                for part in direct:
                    part.done = True
                self._turn.notify_all()
        for s in staged:
            s.queue.end_round(s, s.part.error)
        for s in refused:
            s.queue.end_round(s, self._refusal())
        for queue in queues + late:
            try:
                queue.fire_durable()
            except Exception:  # a callback's own failure: the writer goes on
                log.exception("a durability callback of %s raised", queue.file)

    def _refusal(self) -> StorageError:
        return StorageError("the PostgreSQL writer is closed", details={"database": self.where})

    # -- a round (on the writer's thread) ----------------------------------------------

    def _connected(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            conn = connect(self.dsn, self.where, self.connect_timeout)
            prepare(conn, "", self.where, durability=self.durability, lock=False, read_only=False)
            self._conn = conn
        return conn

    def _round(self, parts: list[Part]) -> None:
        """Store ``parts`` in one transaction; each that fails gets its error."""
        self.rounds += 1
        self.parts += len(parts)
        if store_round(self._connected, parts, self.check):
            self.retries += 1
