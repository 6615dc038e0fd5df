"""Connecting a PostgreSQL store: DSNs without passwords, setup, lock, errors.

The writer's setup and lock, and psycopg errors as :class:`~crdt_state.errors.StorageError`.

Every error names the database as ``postgresql://user@host:port/dbname#key`` and
carries a stable ``details["reason"]``: ``"unavailable"`` (the server does not answer, or
the connection or the server was lost: :func:`connection_lost`), ``"in_use"`` (another
writer holds the key), ``"postgres"`` (a statement failed), ``"refused"`` (the
``before_commit`` hook refused the write); a shared writer's batch whose own statement was
refused fails with ``"rejected"`` (:func:`crdt_state._pg_round.rejected`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict

from . import _pg_schema as pgschema
from .errors import StorageError

__all__ = [
    "Durability",
    "check_options",
    "connect",
    "connection_lost",
    "failures",
    "hook_refused",
    "prepare",
    "release",
    "run_hook",
    "safe_dsn",
]

Durability = Literal["full", "normal", "off"]
SYNCHRONOUS_COMMIT: Final = {"full": "on", "normal": "off", "off": "off"}


def safe_dsn(dsn: str) -> str:
    """``dsn`` for messages: ``postgresql://user@host:port/dbname``, never the password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgresql://(unparsable DSN)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _scrub(text: str, dsn: str) -> str:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return text
    return text.replace(str(password), "***") if password else text


def connect(dsn: str, where: str, timeout: float) -> psycopg.Connection[Any]:
    """An autocommit connection (transactions are explicit).

    Raises:
        StorageError: the server does not answer (``"unavailable"``; no password shown).
    """
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, round(timeout)))
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot connect to PostgreSQL at {where}: {_scrub(str(exc), dsn).strip()}",
            details={"database": where, "reason": "unavailable"},
        ) from None


def prepare(
    conn: psycopg.Connection[Any],
    key: str,
    where: str,
    *,
    durability: Durability,
    lock: bool,
    read_only: bool,
) -> None:
    """Set a fresh connection up: a reader's isolation, or a writer's tables, commit mode, lock.

    Closes ``conn`` when it fails.

    Raises:
        StorageError: another writer holds ``key`` (``"in_use"``), the tables are newer,
            or the server failed.
    """
    try:
        if read_only:  # one consistent version per query while the owner writes
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            return
        pgschema.migrate(conn, where)
        conn.execute(f"SET synchronous_commit = {SYNCHRONOUS_COMMIT[durability]}")
        if lock:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (pgschema.ADVISORY_CLASS, key)
            ).fetchone()
            if row is None or not row[0]:
                raise StorageError(
                    "the state is open in another process or connection"
                    " (its PostgreSQL lock is held)",
                    details={"database": where, "reason": "in_use"},
                )
    except psycopg.Error as exc:
        conn.close()
        raise StorageError(
            f"cannot open the state in PostgreSQL: {exc}",
            details={"database": where, "reason": "unavailable"},
        ) from exc
    except BaseException:
        conn.close()
        raise


def release(conn: psycopg.Connection[Any], locked: bool) -> None:
    """Release the key's lock at once (the server ends a session asynchronously), close."""
    try:
        if locked and not conn.closed:
            conn.execute("SELECT pg_advisory_unlock_all()")
    except psycopg.Error:
        pass  # the connection is gone: so is its lock
    finally:
        conn.close()


class failures:  # used like a function: ``with failures(...):``
    """Turns psycopg errors raised in the block into :class:`StorageError` (cause chained)."""

    def __init__(self, what: str, where: str) -> None:
        self.what = what
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, psycopg.Error):
            reason = "unavailable" if connection_lost(exc) else "postgres"
            raise StorageError(
                f"{self.what}: {exc}", details={"database": self.where, "reason": reason}
            ) from exc


_SERVER_GONE: Final = ("57P01", "57P02", "57P03")
"""SQLSTATEs of a server that shut down or does not take connections (admin shutdown,
crash shutdown, cannot connect now)."""


def connection_lost(exc: psycopg.Error) -> bool:
    """True when ``exc`` says the connection or the server is gone, not a statement failed.

    psycopg's client-side failures (the socket closed, the server vanished mid-reply) are
    ``OperationalError`` without a SQLSTATE; the server's own are class ``08``
    (connection exception) or an operator's shutdown. A store failing that way reports
    ``"unavailable"``, as when it cannot connect at all.
    """
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in _SERVER_GONE


def check_options(key: str, durability: str, keep_history: int, keep_conflicts: int | None) -> None:
    """Raise ``ValueError`` for an option :meth:`PostgresStore.open` cannot take."""
    if not isinstance(key, str) or not key:
        raise ValueError("key must be a non-empty str")
    if durability not in SYNCHRONOUS_COMMIT:
        raise ValueError(f"durability must be 'full', 'normal' or 'off', not {durability!r}")
    if keep_history < 1:
        raise ValueError("keep_history must be at least 1")
    if keep_conflicts is not None and keep_conflicts < 0:
        raise ValueError("keep_conflicts must be >= 0 or None")


def run_hook(
    hook: Callable[[psycopg.Connection[Any], int], None],
    conn: psycopg.Connection[Any],
    ticket: int,
    where: str,
) -> None:
    """Call the store's ``before_commit`` hook inside the write transaction.

    What it raises becomes the ``__cause__`` of a :class:`StorageError` (``"refused"``),
    which rolls the transaction back.
    """
    try:
        hook(conn, ticket)
    except Exception as exc:
        raise hook_refused(exc, where) from exc


def hook_refused(exc: BaseException, where: str) -> StorageError:
    """The :class:`StorageError` (``"refused"``) of a write the hook refused with ``exc``."""
    error = StorageError(
        f"the before_commit hook refused the write: {exc}",
        details={"database": where, "reason": "refused"},
    )
    error.__cause__ = exc
    return error
