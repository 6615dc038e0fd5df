"""The lock of a client's ``local`` file: one client at a time, in this process or another.

The lock is an exclusive, non-blocking ``flock`` on a descriptor of the file opened for
it alone, taken before SQLite opens the file and dropped after SQLite's connection is
closed, as a durable state locks its file (:mod:`crdt_state.file_locks`). ``flock``
locks belong to the open file description, so a second descriptor (another client of
this process, or another process) is refused, SQLite's own (``fcntl``) locks never meet
it, and the system drops it when the process ends, by a crash too. The descriptor is
not inherited by the programs the process runs (``O_CLOEXEC``).

This process also keeps the files its clients hold (by device and inode), so a second
client of this process is refused as such everywhere, also where there is no ``flock``
(Windows: no lock against other processes there, with a warning,
:class:`~crdt_state.file_locks.NoProcessLock`).
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
from pathlib import Path
from typing import Final

from crdt_state.file_locks import NoProcessLock, lock_holder
from sync.wire.errors import LocalFileInUse

__all__ = ["LocalLock", "take"]

_HELD: Final = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
_held: set[tuple[int, int]] = set()
"""The files (device, inode) the clients of this process hold."""
_guard = threading.Lock()


class LocalLock:
    """A held lock of a local file; :meth:`release` drops it (once, idempotent)."""

    def __init__(self, fd: int, identity: tuple[int, int]) -> None:
        self._fd: int | None = fd
        self._identity = identity

    def release(self) -> None:
        """Drop the lock (closing its descriptor); later calls do nothing."""
        with _guard:
            if self._fd is None:
                return
            fd, self._fd = self._fd, None
            _held.discard(self._identity)
            os.close(fd)


def take(file: str | Path) -> LocalLock:
    """Take the lock of ``file``, at once or not at all; creates the file when missing.

    Errors name ``file`` as given.

    Raises:
        LocalFileInUse: another client holds the file, in this process or another (its
            pid when the system tells). Nothing was written to the file.
        OSError: the file cannot be opened (a missing directory, no permission).
    """
    fd = os.open(file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino)
        with _guard:
            if identity in _held:
                raise LocalFileInUse(str(file), os.getpid(), this_process=True)
            _flock(fd, file)
            _held.add(identity)
    except BaseException:
        os.close(fd)
        raise
    return LocalLock(fd, identity)


def _flock(fd: int, file: str | Path) -> None:
    """The exclusive ``flock`` of ``fd``, refused at once when another descriptor holds it."""
    try:
        import fcntl
    except ImportError:
        warnings.warn(
            f"no flock on this platform: the local file {str(file)!r} is not locked against"
            " clients in other processes (only in this one)",
            NoProcessLock,
            stacklevel=4,
        )
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in _HELD:
            raise
        pid = lock_holder(str(file))
        raise LocalFileInUse(str(file), pid, this_process=pid == os.getpid()) from None
