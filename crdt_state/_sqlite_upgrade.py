"""Upgrading state files of older formats (see :mod:`crdt_state._sqlite_file`).

A file of an older format is upgraded when it is opened for writing, in one
transaction with the statements of :func:`upgrade`; every row is kept:

- format 1 kept requests by id alone (table ``requests``): those rows move to
  ``writer_requests`` (writer = the agent of their change, ``clean`` 0);
- formats 1 and 2 kept ``blame`` as a rowid table with a second b-tree, the index of
  its ``path`` key, and ``writer_requests`` with a ``UNIQUE (writer, id)`` index: a
  merge wrote up to a page in each of the four b-trees. Format 3 keeps ``blame``
  ``WITHOUT ROWID`` (one b-tree keyed by path) and ``writer_requests`` with no index
  (rows appended in the order the requests were applied, the order the newest are
  read back in): both tables are rebuilt in that shape, the requests in their order.

Format 3 leaves deduplicating requests to :class:`~crdt_state.requests.RequestMemory`
(loaded from the newest rows when the file is opened): a request is stored once,
when it is applied; one applied again after the memory forgot its key (100,000
newer requests later) is stored again, and the newer row wins when the memory is
loaded back.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BLAME_TABLE", "REQUESTS_TABLE", "upgrade"]

REQUESTS_TABLE: Final = (
    "CREATE TABLE writer_requests (writer TEXT NOT NULL, id INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, token BLOB NOT NULL, paths TEXT NOT NULL, clean INTEGER NOT NULL)"
)
"""The remembered requests, oldest first (rowid), no index (format 3)."""

BLAME_TABLE: Final = (
    "CREATE TABLE blame (path TEXT PRIMARY KEY, seq INTEGER NOT NULL, agent TEXT,"
    " time REAL NOT NULL, token BLOB NOT NULL) WITHOUT ROWID"
)
"""The last change that wrote each path, keyed by path (format 3)."""

_REQUEST_COLUMNS: Final = "writer, id, seq, token, paths, clean"

_FROM_FORMAT_1: Final = (
    f"INSERT INTO writer_requests ({_REQUEST_COLUMNS})"
    " SELECT coalesce(log.agent, ''), r.id, r.seq, r.token, r.paths, 0"
    " FROM requests AS r LEFT JOIN log ON log.seq = r.seq ORDER BY r.seq",
    "DROP TABLE requests",
)
_REBUILD_REQUESTS: Final = (
    "ALTER TABLE writer_requests RENAME TO old_writer_requests",
    REQUESTS_TABLE,
    f"INSERT INTO writer_requests (rowid, {_REQUEST_COLUMNS})"
    f" SELECT rowid, {_REQUEST_COLUMNS} FROM old_writer_requests ORDER BY rowid",
    "DROP TABLE old_writer_requests",
)
_REBUILD_BLAME: Final = (
    "ALTER TABLE blame RENAME TO old_blame",
    BLAME_TABLE,
    "INSERT INTO blame (path, seq, agent, time, token)"
    " SELECT path, seq, agent, time, token FROM old_blame",
    "DROP TABLE old_blame",
)


def upgrade(version: int, tables: set[str], to: int) -> list[str]:
    """The statements that bring a file of format ``version`` holding ``tables`` to ``to``.

    Run them in one transaction. ``to`` is the current format (3); the file's
    ``user_version`` and its ``meta`` row ``format`` are set to it.
    """
    statements: list[str] = []
    if "writer_requests" not in tables:  # format 1, or a file from before request ids
        statements.append(REQUESTS_TABLE)
    elif version < 3:
        statements += _REBUILD_REQUESTS
    if "requests" in tables:
        statements += _FROM_FORMAT_1
    if version < 3:
        statements += _REBUILD_BLAME
    return [
        *statements,
        f"PRAGMA user_version={to}",
        f"UPDATE meta SET value = '{to}' WHERE key = 'format'",
    ]
