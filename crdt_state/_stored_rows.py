"""Checked decoding of stored rows: a damaged column is a :class:`StorageError` naming it.

The SQLite file and the PostgreSQL store keep the same columns in the same
encodings (see :mod:`crdt_state._sqlite_file`). A row read back is checked
column by column here: the wrong type, JSON that does not parse or has the
wrong shape, or bytes that do not decode raise
``StorageError("the <noun> is damaged: <table>.<column> of <row>: <why>")``
with ``details`` ``{"table", "column", "row"}``, never a raw ``JSONDecodeError``,
``ValueError``, ``KeyError`` or ``TypeError``. The store adds the file name.
Pure functions: no SQL, no I/O.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from .conflicts import UNRESOLVED
from .errors import StorageError
from .journal import BlameEntry, ConflictRecord, StoredChange, StoredRequest
from .paths import Path
from .requests import RequestKey
from .values import MISSING
from .version import VersionVector

__all__ = [
    "SQLITE",
    "blame_entry",
    "check_gapless",
    "conflict_record",
    "damaged",
    "decompressed",
    "path_of",
    "stored_change",
    "stored_request",
    "token_of",
    "value_of",
]

SQLITE: Final = "state file"
T = TypeVar("T")


def damaged(
    noun: str, table: str, column: str, row: object, why: str, exc: BaseException | None = None
) -> StorageError:
    """The error for a damaged column (``row``: the row's key, e.g. its seq)."""
    detail = f" ({exc})" if exc is not None else ""
    return StorageError(
        f"the {noun} is damaged: {table}.{column} of row {row!r} {why}{detail}",
        details={"table": table, "column": column, "row": repr(row)},
    )


def _checked(
    decode: Callable[[Any], T], value: Any, noun: str, table: str, column: str, row: object
) -> T:
    try:
        return decode(value)
    except StorageError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, zlib.error) as exc:
        raise damaged(noun, table, column, row, "does not decode", exc) from exc


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"not an integer: {type(value).__name__}")
    return value


def _time(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise TypeError(f"not a time: {value!r:.40}")
    return float(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not text: {type(value).__name__}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _blob(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"not bytes: {type(value).__name__}")
    return bytes(value)


def _path(value: Any) -> Path:
    if not isinstance(value, list) or not all(
        type(key) is str or type(key) is int for key in value
    ):
        raise ValueError(f"not a path (a JSON list of keys and indexes): {value!r:.60}")
    return tuple(value)


def _json(text: Any) -> Any:
    return json.loads(_text(text))


def _paths(text: Any) -> tuple[Path, ...]:
    data = _json(text)
    if not isinstance(data, list):
        raise ValueError(f"not a list of paths: {data!r:.60}")
    return tuple(_path(p) for p in data)


def path_of(text: Any, noun: str, table: str, row: object) -> Path:
    """A stored path key (``["a",0]``) as a path."""
    return _checked(lambda t: _path(_json(t)), text, noun, table, "path", row)


def token_of(value: Any, noun: str, table: str, row: object) -> VersionVector:
    """A stored state vector (``token`` column)."""
    return _checked(lambda v: VersionVector.from_state(_blob(v)), value, noun, table, "token", row)


def decompressed(value: Any, noun: str, table: str, column: str, row: object) -> bytes:
    """A zlib-compressed blob, inflated."""
    return _checked(lambda v: zlib.decompress(_blob(v)), value, noun, table, column, row)


def _value(text: Any) -> Any:
    data = _json(text)
    if isinstance(data, dict) and len(data) == 1:
        ((key, inner),) = data.items()
        if key == "v":
            return inner
        if key == "repr" and isinstance(inner, str):
            return inner
        if (key, inner) == ("missing", True):
            return MISSING
        if (key, inner) == ("unresolved", True):
            return UNRESOLVED
    raise ValueError(f"not a wrapped audit value: {text!r:.60}")


def value_of(text: Any) -> Any:
    """Inverse of :func:`crdt_state._sqlite_file.encode_value`.

    Raises:
        ValueError: ``text`` is not one of the wrapped forms.
    """
    return _value(text)


def stored_change(row: Sequence[Any], noun: str = SQLITE) -> StoredChange:
    """A ``log`` row ``(seq, token, doc_update, agent, origin, time, paths)``.

    Rows whose columns have the usual types are checked in one pass (a reopening
    reads up to a whole retained log); any other row goes through the column by
    column checks, which accept the same rows and name the damaged column.
    """
    seq, token, update, agent, origin, when, paths = row
    if (
        type(seq) is int
        and type(token) is bytes
        and type(update) is bytes
        and (agent is None or type(agent) is str)
        and type(origin) is str
        and type(when) is float
        and math.isfinite(when)
        and type(paths) is str
    ):
        written = _known_paths(paths)
        if written is not None:
            try:
                decoded = VersionVector.from_state(token)
            except ValueError:  # InvalidUpdate: the checked path names the column
                pass
            else:
                return StoredChange(seq, decoded, update, agent, origin, when, written)
    return _checked_change(row, noun)


@functools.lru_cache(maxsize=1024)
def _known_paths(text: str) -> tuple[Path, ...] | None:
    """``paths`` decoded, or ``None`` when it does not decode (the checked path raises).

    Cached: a room's changes write the same few paths over and over (the result is
    immutable).
    """
    try:
        return _paths(text)
    except (ValueError, TypeError, RecursionError):
        return None


def _checked_change(row: Sequence[Any], noun: str) -> StoredChange:
    seq, token, update, agent, origin, when, paths = row

    def col(decode: Callable[[Any], T], value: Any, column: str) -> T:
        return _checked(decode, value, noun, "log", column, seq)

    return StoredChange(
        seq=col(_int, seq, "seq"),
        token=token_of(token, noun, "log", seq),
        update=col(_blob, update, "doc_update"),
        agent=col(_optional_text, agent, "agent"),
        origin=col(_text, origin, "origin"),
        time=col(_time, when, "time"),
        paths=col(_paths, paths, "paths"),
    )


def blame_entry(row: Sequence[Any], noun: str = SQLITE) -> BlameEntry:
    """A ``blame`` row ``(path, seq, agent, time, token)``."""
    written, seq, agent, when, token = row

    def col(decode: Callable[[Any], T], value: Any, column: str) -> T:
        return _checked(decode, value, noun, "blame", column, written)

    return BlameEntry(
        path=path_of(written, noun, "blame", written),
        agent=col(_optional_text, agent, "agent"),
        time=col(_time, when, "time"),
        token=token_of(token, noun, "blame", written),
        seq=col(_int, seq, "seq"),
    )


def conflict_record(row: Sequence[Any], noun: str = SQLITE) -> ConflictRecord:
    """A ``conflicts`` row (the columns of :func:`crdt_state._sqlite_log.conflict_rows`)."""
    path, base, current, incoming, c_agent, i_agent, policy, resolution, applied, token, when = row

    def col(decode: Callable[[Any], T], value: Any, column: str) -> T:
        return _checked(decode, value, noun, "conflicts", column, path)

    return ConflictRecord(
        path=path_of(path, noun, "conflicts", path),
        base=col(_value, base, "base"),
        current=col(_value, current, "current"),
        incoming=col(_value, incoming, "incoming"),
        current_agent=col(_optional_text, c_agent, "current_agent"),
        incoming_agent=col(_optional_text, i_agent, "incoming_agent"),
        policy=col(_optional_text, policy, "policy"),
        resolution=col(_value, resolution, "resolution"),
        applied=bool(col(_int, int(applied) if type(applied) is bool else applied, "applied")),
        token=token_of(token, noun, "conflicts", path),
        time=col(_time, when, "time"),
    )


def stored_request(row: Sequence[Any], noun: str = SQLITE) -> StoredRequest:
    """A ``writer_requests`` row ``(writer, id, seq, token, paths, clean)``."""
    writer, rid, seq, token, paths, clean = row
    key = (writer, rid)

    def col(decode: Callable[[Any], T], value: Any, column: str) -> T:
        return _checked(decode, value, noun, "writer_requests", column, key)

    return StoredRequest(
        key=RequestKey(col(_text, writer, "writer"), col(_int, rid, "id")),
        seq=col(_int, seq, "seq"),
        token=token_of(token, noun, "writer_requests", key),
        paths=col(_paths, paths, "paths"),
        clean=bool(col(_int, int(clean) if type(clean) is bool else clean, "clean")),
    )


def check_gapless(changes: Sequence[StoredChange], snapshot_seq: int, noun: str) -> None:
    """Check that the log rows read after the snapshot at ``snapshot_seq`` follow it without gap.

    Raises:
        StorageError: a seq is missing (``details``: the expected and the found seq).
    """
    for expected, row in enumerate(changes, start=snapshot_seq + 1):
        if row.seq != expected:
            raise StorageError(
                f"the {noun} is damaged: the change log has a gap",
                details={"expected_seq": expected, "found_seq": row.seq},
            )
