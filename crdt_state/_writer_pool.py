"""The writer threads that the group commits of a process share (SQLite stores).

A :class:`~crdt_state._group_commit.GroupCommit` (``shared=True``; a queue with
``shared=False`` has a :class:`WriterPool` of one thread to itself) with items to
write submits one *job* (a callable that writes one batch of that queue) here; a few threads
run the jobs in the order they came. A queue is submitted once at a time: its
job, once done, submits it again (at the back) when more items came meanwhile,
so one queue's batches are written one after the other, in order, and a busy
queue does not keep the others waiting for more than one batch.

Why shared: a hub holds one durable state per room. A thread per state meant,
with 20 rooms, 20 threads contending for the GIL with the event loop's thread
(each SQLite statement step releases and takes it back), each committing its
room's batch as soon as one merge came; a few threads take turns over the rooms, each
room's batch grows while the others commit, and the loop's thread competes
with a few threads instead of one per room. A slow batch (a large compaction,
a slow disk) holds up one thread, not the others (:data:`THREADS`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Final

__all__ = ["THREADS", "WriterPool", "as_writer_thread", "on_writer_thread", "shared"]

THREADS: Final = 4
"""Writer threads a process starts at most (they start as jobs come, and stay)."""

Job = Callable[[], None]


class WriterPool:
    """Jobs in order and the threads that run them (started on demand, daemons).

    Args:
        threads: how many threads at most.
    """

    def __init__(self, threads: int) -> None:
        self.size = threads
        self.lock = threading.Lock()
        self.work = threading.Condition(self.lock)
        self.jobs: deque[Job] = deque()
        self.threads = 0
        self.idle = 0
        self.stopping = False

    def submit(self, job: Job) -> None:
        """Run ``job`` on a writer thread, after the jobs submitted before it.

        ``job`` must not raise (an exception would end its thread).
        """
        with self.lock:
            self.jobs.append(job)
            if self.idle > 0:
                self.work.notify()
                return
            if self.threads >= self.size:
                return  # a busy thread takes it next
            self.threads += 1
        threading.Thread(target=self.run, name="crdt-state-writer", daemon=True).start()

    def stop(self) -> None:
        """Let the threads end once no job is left (a pool of one store, closed)."""
        with self.lock:
            self.stopping = True
            self.work.notify_all()

    def run(self) -> None:
        _local.writer = True
        try:
            while True:
                with self.lock:
                    while not self.jobs and not self.stopping:
                        self.idle += 1
                        self.work.wait()
                        self.idle -= 1
                    if not self.jobs:
                        return
                    job = self.jobs.popleft()
                job()  # a job reports its own failures to its queue; it never raises
        finally:  # it did raise after all: let a new thread take this one's place
            with self.lock:
                self.threads -= 1


_local = threading.local()
_pool = WriterPool(THREADS)


def shared() -> WriterPool:
    """The pool of the process (of :data:`THREADS` threads)."""
    return _pool


def on_writer_thread() -> bool:
    """True on one of the writer threads (a durability callback, say)."""
    return getattr(_local, "writer", False)


def as_writer_thread() -> None:
    """Count the calling thread as a writer thread (the thread of a round writer)."""
    _local.writer = True


def _forked() -> None:  # the child has none of the parent's threads: start afresh
    global _pool
    _pool = WriterPool(THREADS)


os.register_at_fork(after_in_child=_forked)
