"""The writer lock of a state file: one writer per file, across processes.

The lock is an exclusive ``flock`` on a descriptor of the database file opened for
it alone, taken before SQLite opens the file and dropped after SQLite's connection
is closed. ``flock`` locks belong to the open file description, so closing other
descriptors of the file (SQLite's, a reader's) never drops it, and they never meet
SQLite's own (``fcntl``) locks. The system drops it when the process dies.

Where there is no ``fcntl`` module (Windows) there is **no cross-process lock**:
:func:`take` opens the descriptor all the same and warns (:class:`NoProcessLock`);
a second writer in this process is still refused (``crdt_state.storage`` keeps
the files it holds), one in another process is not. Windows byte-range locks
(``msvcrt.locking``) are mandatory, so a lock on bytes of the database would stop
SQLite's own reads and writes of them; that is why they are not used on the file.

:func:`retry_while_in_use` gives a file held by another connection
:data:`OPEN_WAIT` seconds (two processes opening it at the same moment each see the
other's brief lock), then names the holder's pid when the system tells
(``/proc/locks`` on Linux).
"""

from __future__ import annotations

import errno
import os
import time
import warnings
from collections.abc import Callable
from typing import Final, TypeVar

from ._file_errors import IN_USE_REASON, in_this_process, in_use, os_failure, refuse
from .errors import StorageError

__all__ = ["OPEN_WAIT", "NoProcessLock", "drop", "lock_holder", "retry_while_in_use", "take"]

T = TypeVar("T")

OPEN_WAIT: Final = 1.5
"""Seconds :func:`retry_while_in_use` retries a file locked by another connection."""
_HELD: Final = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class NoProcessLock(RuntimeWarning):
    """This platform has no ``flock``: a state file is not locked against other processes."""


def _flock() -> Callable[[int], None] | None:
    """The exclusive, non-blocking ``flock`` of a descriptor; ``None`` without ``fcntl``."""
    try:
        import fcntl
    except ImportError:
        return None

    def lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    return lock


def take(file: str) -> int:
    """Take the writer lock of ``file``: a descriptor of its own, locked (see the module).

    Creates the file when missing (empty: a new state).

    Returns:
        The descriptor holding the lock, for :func:`drop`.

    Raises:
        StorageError: the file cannot be opened, or another descriptor holds the lock
            (``details["reason"]`` ``"open_in_another_process"``).
    """
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise os_failure("cannot open the state file", file, exc) from exc
    lock = _flock()
    if lock is None:
        warnings.warn(
            f"no flock on this platform: the state file {file!r} is not locked against"
            " writers in other processes (only in this one)",
            NoProcessLock,
            stacklevel=2,
        )
        return fd
    try:
        lock(fd)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _HELD:
            raise in_use(file, exc) from exc
        raise refuse(f"cannot lock the state file: {exc}", file, exc) from exc
    return fd


def drop(fd: int) -> None:
    """Drop the writer lock (closing its descriptor)."""
    os.close(fd)


def retry_while_in_use(file: str, attempt: Callable[[], T]) -> T:
    """``attempt()``, retried with backoff while it says ``file`` is in use.

    Raises:
        StorageError: still in use after :data:`OPEN_WAIT` seconds (naming the
            holder's pid in ``details["pid"]`` when known; a holder that is this
            process gives the ``"open_in_this_process"`` error), or whatever
            else ``attempt`` raised.
    """
    deadline = time.monotonic() + OPEN_WAIT
    pause = 0.005
    while True:
        try:
            return attempt()
        except StorageError as exc:
            if exc.details.get("reason") != IN_USE_REASON:
                raise
            if time.monotonic() >= deadline:
                holder = lock_holder(file)
                if holder is None:
                    raise
                if holder == os.getpid():
                    raise in_this_process(file) from exc.__cause__
                raise in_use(file, exc.__cause__, holder) from exc.__cause__
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.2)


def lock_holder(file: str) -> int | None:
    """The pid of a process holding an ``flock`` on ``file`` (Linux ``/proc/locks``), if any."""
    try:
        stat = os.stat(file)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields or "FLOCK" not in fields:  # a waiter, or a reader's SQLite lock
            continue
        try:
            pid, where = int(fields[4]), fields[5].split(":")
            major, minor, inode = int(where[0], 16), int(where[1], 16), int(where[2])
        except (IndexError, ValueError):
            continue
        same = (major, minor) == (os.major(stat.st_dev), os.minor(stat.st_dev))
        if same and inode == stat.st_ino:
            return pid
    return None
