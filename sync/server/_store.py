"""Hub persistence: one SQLite file per room, through ``SharedState.open``.

The hub's ``db`` is a directory; room ``triage/42`` lives in the file
``<db>/triage%2F42.sqlite``. Each file is a durable state (WAL, group commit,
compaction that never replaces data with an empty document; see
``crdt_state.storage``): a merge is acknowledged to a client only after it is
on disk, so killing the hub loses nothing acknowledged; and no change is sent
to any client before it is on disk (see :mod:`sync.server._room`), so no client holds
a change that a restarted hub lacks. Loading a room logs ``room_loading`` (with the
file's size) and ``room_loaded`` (seconds, changes) events on ``crdt_state.hub``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from crdt_state import SharedState
from sync.server._security import HubConfigError

__all__ = [
    "MAX_FILE_NAME",
    "check_room_directory",
    "room_directory_problem",
    "open_room_state",
    "room_file",
    "room_file_fits",
]

MAX_FILE_NAME: Final = 255
"""Bytes in one file name on common file systems (ext4, APFS, NTFS in UTF-16 units)."""

_LONGEST_SUFFIX: Final = ".sqlite-journal"
"""The longest name SQLite derives from a database file (``-wal``, ``-shm``, ``-journal``)."""

log = logging.getLogger("crdt_state.hub")


def room_directory_problem(db: Path) -> str | None:
    """Why room files cannot be created in ``db`` (made when missing), or ``None``."""
    if db.exists() and not db.is_dir():
        return "it is a file, not a directory"
    probe = db / f".crdt-state-probe-{os.getpid()}"
    try:
        db.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def check_room_directory(db: Path) -> None:
    """Create ``db`` when missing and check that room files can be made there.

    A hub started on a directory it cannot write answered every client with "1011
    internal error" and logged a traceback per attempt; it now refuses to start.

    Raises:
        HubConfigError: code ``db``; names the directory and the system's reason.
    """
    problem = room_directory_problem(db)
    if problem is not None:
        raise HubConfigError(
            "db", f"--db {str(db)!r}: room files cannot be created there ({problem})"
        )


def room_file(db: Path, name: str) -> Path:
    """The SQLite file that holds room ``name`` under the hub directory ``db``."""
    return db / (quote(name, safe="") + ".sqlite")


def room_file_fits(name: str) -> bool:
    """Tell whether every file of room ``name`` has a name the file system takes.

    That is the room's database and SQLite's companion files, each name at most
    :data:`MAX_FILE_NAME` bytes.
    """
    return len(quote(name, safe="").encode()) + len(_LONGEST_SUFFIX) <= MAX_FILE_NAME


def open_room_state(
    db: Path, name: str, *, resolvers: Mapping[Any, object] | None = None, **options: Any
) -> SharedState:
    """Open (or create) the durable state of room ``name``."""
    db.mkdir(parents=True, exist_ok=True)
    # clients keep replicas of the room's document: it must keep its identity
    options.setdefault("compact_document", False)
    file = room_file(db, name)
    size = file.stat().st_size if file.exists() else None
    started = time.perf_counter()
    if size is not None:  # reloading can take a while for a big room: say so first
        log.info("room %s: loading %d bytes", name, size,
                 extra={"event": "room_loading", "room": name, "bytes": size})  # fmt: skip
    state = SharedState.open(file, resolvers=resolvers, **options)
    seconds = time.perf_counter() - started
    log.info(
        "room %s: %s in %.3f s (%d changes)",
        name,
        "created" if size is None else "loaded",
        seconds,
        state.position,
        extra={"event": "room_loaded", "room": name, "seconds": seconds, "seq": state.position},
    )
    return state
