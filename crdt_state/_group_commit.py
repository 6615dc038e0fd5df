"""Group commit: items queued in order, committed in batches on a writer thread.

A store queues each item under the state's lock and gets a ticket (1, 2, ...);
a writer thread takes everything queued so far and hands it to ``write`` in one
call (one transaction, one fsync), then runs ``after`` (compaction, say). The
writer threads are shared by every queue of the process
(:mod:`crdt_state._writer_pool`); one queue's batches are written one at a
time, in order, and a failure of one queue touches no other. Tickets
are durable once their batch was written, and settled once ``after`` ran too.
After a failed write every later call raises :class:`StorageError`: what was
queued since is never written. Knows nothing about SQLite.

:class:`~crdt_state._group_rounds.RoundCommit` writes the batches in rounds of a
writer that commits many queues together instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from . import _writer_pool
from .errors import StorageError
from .journal import DurableCallback

__all__ = ["GroupCommit"]

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """The queue, the tickets and the writes of one store (on the shared writer threads).

    Args:
        file: where the items go, for error messages.
        write: writes one batch of ``(ticket, item)`` in order (on the writer thread);
            an exception fails the queue for good.
        after: runs on the writer thread after each written batch.
        off: ``durability="off"``: :meth:`wait` and :meth:`on_durable` do not wait.
        shared: write on the process's shared writer threads; else on a thread of
            this queue's own (that ends when it closes).
    """

    def __init__(
        self,
        file: str,
        write: Callable[[list[tuple[int, T]]], None],
        after: Callable[[], None],
        *,
        off: bool,
        shared: bool = True,
    ) -> None:
        self.file = file
        self._write = write
        self._after = after
        self._off = off
        self._lock = threading.Lock()  # guards the queue and the counters below
        self._done = threading.Condition(self._lock)
        self._queue: list[tuple[int, T]] = []
        self._callbacks: list[tuple[int, DurableCallback]] = []
        self._issued = 0
        self._durable = 0
        self._settled = 0  # tickets whose write and the ``after`` that followed are done
        self.failed: StorageError | None = None
        self._closing = False
        self.closed = False
        self._submitted = False  # a job of this queue waits for a writer thread
        self._writing: int | None = None  # the thread writing a batch of this queue now
        self._pool = _writer_pool.shared() if shared else _writer_pool.WriterPool(1)
        self._own_pool = not shared

    def enqueue(self, item: T) -> int:
        """Queue ``item``; its ticket.

        Raises:
            StorageError: the queue failed earlier, or is closed.
        """
        with self._lock:
            if self.failed is not None:
                raise self._failure("the store failed earlier; this change is not stored")
            if self._closing:
                raise StorageError(
                    "the durable state is closed; this change is not stored (reopen the file)",
                    details={"file": self.file},
                )
            self._issued += 1
            self._queue.append((self._issued, item))
            if self._writing is None:
                self._submit()
            return self._issued

    # -- waiting ---------------------------------------------------------------------
    def wait(self, ticket: int) -> None:
        """Return once ``ticket`` is written (at once when ``off``)."""
        if self._off:
            if self.failed is not None:
                raise self._failure()
            return
        self._wait(ticket)

    def on_durable(self, ticket: int, done: DurableCallback) -> None:
        """Call ``done(None)`` once ``ticket`` is written, ``done(error)`` if it never will be.

        ``done`` runs on the writer thread (or at once, on the caller's); at once when ``off``.
        """
        with self._lock:
            if self._off or self._durable >= ticket:
                error = self._failure() if self.failed is not None else None
            elif self.failed is not None:
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
        outer, _firing.queue = getattr(_firing, "queue", None), self
        raised: BaseException | None = None
        try:
            for _, callback in ready:
                try:
                    callback(error)
                except BaseException as exc:  # the others still run; the first is raised
                    raised = raised or exc
        finally:
            _firing.queue = outer
        if raised is not None:
            raise raised

    def _wait(self, ticket: int, settled: bool = False) -> None:
        """Wait until ``ticket`` is durable (``settled``: and ``after`` ran)."""
        with self._lock:
            while self._reached(ticket, settled) is False and self.failed is None:
                self._done.wait()
            if not self._reached(ticket, settled):
                raise self._failure()

    def _reached(self, ticket: int, settled: bool) -> bool:
        return (self._settled if settled else self._durable) >= ticket

    def _failure(self, message: str = "the change could not be stored") -> StorageError:
        """The error of a change never stored (the original error chained).

        Its ``details`` are the failure's (its ``"reason"``...), with ``"file"`` and
        ``"cause"`` (the failure's message). After a failed write its message also
        names the cause (its first line) and what to do: the store takes no more
        writes, and the state opened again loads what was stored.
        """
        failed = self.failed
        if failed is None:  # closed, not failed
            return StorageError(message, details={"file": self.file, "cause": "closed"})
        lines = failed.message.strip().splitlines()
        error = StorageError(
            f"{message} ({lines[0] if lines else 'unknown'}); this store takes no more "
            "writes: open the state again, it loads what was stored",
            details={**failed.details, "file": self.file, "cause": failed.message},
        )
        error.__cause__ = failed.__cause__ or failed  # the original error (a disk's, a hook's)
        return error

    def last_ticket(self) -> int:
        """The ticket of the newest item queued so far (0 when none)."""
        with self._lock:
            return self._issued

    def flush(self) -> None:
        """Wait until everything queued so far is written and settled.

        Whatever the durability; settled: the ``after`` of those writes ran
        (queries then read a settled file).

        Raises:
            StorageError: the queue is closed, or failed.
        """
        with self._lock:
            if self.closed:
                raise StorageError("the durable state is closed", details={"file": self.file})
            ticket = self._issued
        self._wait(ticket, settled=True)

    # -- the writer threads --------------------------------------------------------------
    def _job(self) -> None:
        """Write one batch (on a writer thread); submit the queue again if more came."""
        if not self._claim():
            return
        more = False
        try:
            more = self._write_one()
        finally:
            self._release(more)

    def _release(self, more: bool) -> None:
        """The batch under way is done: let the next one go (submitted if ``more`` came)."""
        with self._lock:
            self._writing = None
            if more and self._queue:
                self._submit()
            self._done.notify_all()

    def _claim(self) -> bool:
        """Take this queue's turn to write on this thread; False: nothing to write now.

        Called where the queue was handed over (:meth:`_submit`): a closing caller may
        be writing it, its items may be written already, or the queue failed.
        """
        with self._lock:
            self._submitted = False
            if self._writing is not None or not self._queue or self.failed is not None:
                self._done.notify_all()  # a closing caller writes it, or nothing is left
                return False
            self._writing = threading.get_ident()
            return True

    def _submit(self) -> None:
        """Hand this queue over to be written unless it waits already (lock held)."""
        if not self._submitted:
            self._submitted = True
            self._hand_over()

    def _hand_over(self) -> None:
        """Give this queue to a writer thread (lock held)."""
        self._pool.submit(self._job)

    def _write_one(self) -> bool:
        """Write the queued items as one batch, then run ``after``; False once failed.

        The caller set ``_writing`` (no other thread writes this queue meanwhile).
        """
        with self._lock:
            batch, self._queue = self._queue, []
        if not batch:
            return True
        if not self._write_batch(batch):
            self._fire(failed=True)
            return False
        self._durable_at(batch)
        if self._callbacks:
            self._fire(failed=False)
        self._settle(batch)
        return True

    def _write_batch(self, batch: list[tuple[int, T]]) -> bool:
        """``write`` the batch; False (the queue failed) when it raised."""
        try:
            self._write(batch)
        except BaseException as exc:
            self._failed(exc)
            return False
        return True

    def _failed(self, exc: BaseException) -> None:
        """The queue failed for good with ``exc`` (no callback fired yet)."""
        error = exc if isinstance(exc, StorageError) else None
        with self._lock:
            self.failed = error or StorageError(
                f"writing the state file failed: {exc}", details={"file": self.file}
            )
            if error is None:
                self.failed.__cause__ = exc
            self._done.notify_all()

    def _durable_at(self, batch: list[tuple[int, T]]) -> None:
        with self._lock:
            self._durable = batch[-1][0]
            self._done.notify_all()

    def _settle(self, batch: list[tuple[int, T]]) -> None:
        """Run ``after``; the batch is settled then, whatever ``after`` did."""
        try:
            self._after()
        finally:  # ``after`` reports its own failures; settled either way
            with self._lock:
                self._settled = batch[-1][0]
                self._done.notify_all()

    def close(self) -> bool:
        """Write what is queued, stop the writer; ``False`` when closed already.

        Callbacks of tickets that were never written are called with the error.

        Raises:
            RuntimeError: called from this queue's own durability callback (its batch
                is being written on this thread: it cannot wait for it).
        """
        with self._lock:
            if self.closed:
                return False
            if self._writing == threading.get_ident() or getattr(_firing, "queue", None) is self:
                raise RuntimeError("a store cannot be closed from its own durability callback")
            self.closed = True
            self._closing = True  # nothing is queued from now on
        self._drain()
        if self._own_pool:
            self._pool.stop()
        if self._callbacks:  # tickets the writer never committed
            self._fire(failed=True)
        # ``write`` and ``after`` are the store's bound methods, and the store holds this
        # queue: dropping them leaves no reference cycle, so a closed store (its SQLite
        # connection, its tables) is freed at once, not by a later cyclic collection.
        self._write = self._after = _gone
        return True

    def _drain(self) -> None:
        """Return once every queued item is written (or the queue failed).

        On a writer thread (closing from a durability callback, say) the rest is
        written here: waiting for another turn of the writer threads could wait
        for this very thread.
        """
        inline = _writer_pool.on_writer_thread()
        with self._lock:
            while self.failed is None and (
                self._writing is not None or self._queue or self._submitted
            ):
                if inline and self._writing is None and self._queue:
                    self._writing = threading.get_ident()
                    self._lock.release()
                    try:
                        self._write_one()
                    finally:
                        self._lock.acquire()
                        self._writing = None
                    continue
                if inline and self._writing is None:
                    break  # a stale job of this queue: it finds nothing to write
                self._done.wait()


_firing = threading.local()  # ``queue``: the queue whose durability callbacks run here now


def _gone(*_: object) -> None:
    """What a closed queue holds instead of its store's ``write`` and ``after``."""
