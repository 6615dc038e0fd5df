"""The errors of opening a state file, built in one place.

Every refusal is a :class:`StorageError` naming the file (``details["file"]``), with
SQLite's or the system's message (``details["sqlite"]``) when there is one, and a
stable ``details["reason"]`` where callers branch on it. Used by
:mod:`crdt_state._sqlite_file` (opening, checking) and :mod:`crdt_state._file_lock`
(the writer lock); neither knows the other's details.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from typing import Any, Final

from .errors import StorageError

__all__ = [
    "IN_USE",
    "IN_USE_REASON",
    "failure",
    "in_this_process",
    "in_use",
    "is_busy",
    "os_failure",
    "refuse",
]

IN_USE: Final = "the state file is open in another process"
IN_USE_REASON: Final = "open_in_another_process"
_DESCRIPTORS_GONE: Final = (errno.EMFILE, errno.ENFILE)


def refuse(message: str, file: str, exc: BaseException | None = None) -> StorageError:
    """A :class:`StorageError` about ``file``, with ``exc``'s message when given."""
    details: dict[str, Any] = {"file": file}
    if exc is not None:
        details["sqlite"] = str(exc)
    return StorageError(message, details=details)


def os_failure(message: str, file: str, exc: OSError) -> StorageError:
    """:func:`refuse` for a system call's error ``exc``.

    ``details["errno"]`` is ``"EMFILE"`` when the process (or the system) is out of file
    descriptors.
    """
    error = refuse(f"{message}: {exc}", file, exc)
    if exc.errno in _DESCRIPTORS_GONE:
        error.details["errno"] = "EMFILE"
    return error


def _out_of_descriptors() -> bool:
    """True when this process cannot open one more file (EMFILE, or ENFILE system-wide)."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        return exc.errno in _DESCRIPTORS_GONE
    os.close(fd)
    return False


def failure(what: str, file: str, exc: sqlite3.Error) -> StorageError:
    """The error for ``exc`` raised while opening ``file``.

    SQLite says "unable to open database file" when the process is out of file
    descriptors, which is not damage.
    """
    if _out_of_descriptors():
        error = refuse(
            f"cannot open the state file: too many open files in this process (EMFILE): {exc}",
            file,
            exc,
        )
        error.details["errno"] = "EMFILE"
        return error
    return refuse(f"{what}: {exc}", file, exc)


def in_this_process(file: str) -> StorageError:
    """The error for a file this process already holds open (another state or store)."""
    return StorageError(
        "the state file is already open in this process (another SharedState or store"
        " holds it): use that one, or close it first (a state dropped without close()"
        " keeps its file until the process exits: open it with 'with SharedState.open(...)"
        " as state:')",
        details={"file": file, "reason": "open_in_this_process"},
    )


def in_use(file: str, exc: BaseException | None, pid: int | None = None) -> StorageError:
    """The error for a file another connection holds (``details["pid"]`` when known)."""
    error = refuse(IN_USE if pid is None else f"{IN_USE} (pid {pid})", file, exc)
    error.details["reason"] = IN_USE_REASON
    if pid is not None:
        error.details["pid"] = pid
    return error


def is_busy(exc: sqlite3.Error) -> bool:
    """True when ``exc`` is SQLite saying another connection holds a lock."""
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED") or (
        "locked" in str(exc)
    )
