"""Damaged state files: every corruption is a StorageError naming the file, or consistent data.

A bounded fuzz (fixed seed, ~150 corruptions): rows of the log, blame, conflicts and
writer_requests tables given garbage JSON, bad UTF-8, wrong types; snapshot and update
blobs replaced; bytes flipped; the file truncated; pages zeroed. Opening the file and
reading its history, old versions, blame and conflicts must either raise
:class:`crdt_state.StorageError` (code ``storage``, ``details["file"]``) or return data
of the documented types, never a raw decoding or sqlite3 error.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import sqlite3
from pathlib import Path as FilePath
from typing import Any

import pytest

from crdt_state import (
    BlameEntry,
    ConflictRecord,
    HistoryEntry,
    SharedState,
    StorageError,
    UnknownBase,
    resolvers,
)

SEED = 20261203
GARBAGE: list[Any] = [
    "{not json",
    "",
    "[1, [2]]",
    '{"a": 1}',
    '"text"',
    "[[{}]]",
    "[[null, true]]",
    '{"v": 1, "x": 2}',
    "{}",
    "[]",
    "null",
    "1e999",
    17,
    -3.5,
    None,
    b"\xff\xfe\x00garbage",
    b"",
    b"\x01\x80",
    "\u00e9\u20ac",
]
BAD_UTF8 = "CAST(x'fffec328a0a1' AS TEXT)"

COLUMNS: dict[str, list[str]] = {
    "log": ["token", "doc_update", "agent", "origin", "time", "paths", "seq"],
    "blame": ["path", "seq", "agent", "time", "token"],
    "conflicts": [
        "path",
        "base",
        "current",
        "incoming",
        "current_agent",
        "incoming_agent",
        "policy",
        "resolution",
        "applied",
        "token",
        "time",
    ],
    "writer_requests": ["writer", "id", "seq", "token", "paths", "clean"],
    "snapshot": ["seq", "token", "doc", "time"],
}


def make_state_file(file: FilePath) -> None:
    """A file with a snapshot, log rows, blame, audited conflicts and remembered requests."""
    state = SharedState.open(file, keep_history=200)
    for i in range(12):
        base = state.token
        state.commit({f"k{i % 4}": i, ("nested", f"n{i}"): [i, "x"]}, base, "ann", request_id=i)
        state.commit(
            {f"k{i % 4}": -i},
            base,
            "bob",
            resolvers={f"k{i % 4}": resolvers.maximum},
            writer="bob",
            request_id=100 + i,
        )
    state.close()


def read_everything(file: FilePath) -> None:
    """Open ``file`` and read all it answers, checking the types of what comes back."""
    state = SharedState.open(file)
    try:
        snapshot = state.snapshot()
        assert isinstance(snapshot, dict)
        entries = state.history()
        for entry in entries:
            assert isinstance(entry, HistoryEntry)
            assert isinstance(entry.seq, int) and isinstance(entry.time, float | int)
            assert all(isinstance(p, tuple) for p in entry.paths)
            assert entry.agent is None or isinstance(entry.agent, str)
        for entry in entries[:: max(1, len(entries) // 4)]:
            with contextlib.suppress(UnknownBase):  # a damaged token names no version
                assert isinstance(state.at(entry.token), dict)
        for key in ("k0", "k1", "nested", "nested/n3", "zzz"):
            found = state.blame(key)
            assert found is None or isinstance(found, BlameEntry)
            if found is not None:
                assert isinstance(found.path, tuple) and isinstance(found.seq, int)
        for record in state.conflicts():
            assert isinstance(record, ConflictRecord)
            assert isinstance(record.path, tuple) and isinstance(record.applied, bool)
        state.commit({"after": 1}, state.token, "carl")
    finally:
        state.close()


def corrupt_row(file: FilePath, rng: random.Random) -> str:
    table = rng.choice(sorted(COLUMNS))
    column = rng.choice(COLUMNS[table])
    conn = sqlite3.connect(file, isolation_level=None)
    try:
        key = "path" if table == "blame" else "rowid"  # blame is WITHOUT ROWID: keyed by path
        rowids = [r[0] for r in conn.execute(f"SELECT {key} FROM {table}")]
        if not rowids:
            return f"{table} is empty"
        rowid = rng.choice(rowids)
        if rng.random() < 0.2:
            sql = f"UPDATE OR IGNORE {table} SET {column} = {BAD_UTF8} WHERE {key} = ?"
            params: tuple[Any, ...] = (rowid,)
            value: Any = "bad utf-8"
        else:
            value = rng.choice(GARBAGE)
            sql = f"UPDATE OR IGNORE {table} SET {column} = ? WHERE {key} = ?"
            params = (value, rowid)
        try:
            conn.execute(sql, params)
        except sqlite3.IntegrityError:  # NOT NULL, a primary key's type: the file cannot hold it
            return f"{table}.{column} refused {value!r}"
    finally:
        conn.close()
    return f"{table}.{column} row {rowid} = {value!r}"


def corrupt_bytes(file: FilePath, rng: random.Random) -> str:
    data = bytearray(file.read_bytes())
    kind = rng.choice(["flip", "truncate", "zero_page", "garbage_page"])
    if kind == "flip":
        spots = [rng.randrange(len(data)) for _ in range(rng.randint(1, 8))]
        for spot in spots:
            data[spot] ^= 1 << rng.randrange(8)
        what = f"flipped bits at {spots}"
    elif kind == "truncate":
        cut = rng.randrange(1, len(data))
        del data[cut:]
        what = f"truncated at {cut}"
    else:
        page = rng.randrange(max(1, len(data) // 4096))
        fill = bytes(4096) if kind == "zero_page" else rng.randbytes(4096)
        data[page * 4096 : page * 4096 + 4096] = fill
        what = f"{kind} {page}"
    file.write_bytes(bytes(data))
    return what


def check(file: FilePath, what: str) -> None:
    try:
        read_everything(file)
    except StorageError as exc:
        assert exc.code == "storage", what
        assert exc.details.get("file") == str(file), (what, exc.details)
        assert "damaged" in str(exc) or "not a" in str(exc) or "tables" in str(exc), (what, exc)
    except Exception as exc:  # the point: nothing else may escape
        pytest.fail(f"{what}: raised {type(exc).__name__}: {exc}")


def test_corrupted_rows_raise_storage_error_or_read_consistently(tmp_path: FilePath) -> None:
    pristine = tmp_path / "pristine.db"
    make_state_file(pristine)
    rng = random.Random(SEED)
    for i in range(100):
        file = tmp_path / f"rows-{i}.db"
        shutil.copyfile(pristine, file)
        what = " / ".join(corrupt_row(file, rng) for _ in range(rng.randint(1, 2)))
        check(file, what)


def test_corrupted_bytes_raise_storage_error_or_read_consistently(tmp_path: FilePath) -> None:
    pristine = tmp_path / "pristine.db"
    make_state_file(pristine)
    rng = random.Random(SEED + 1)
    for i in range(60):
        file = tmp_path / f"bytes-{i}.db"
        shutil.copyfile(pristine, file)
        check(file, corrupt_bytes(file, rng))


@pytest.mark.parametrize(
    ("table", "column", "value", "named"),
    [
        ("log", "paths", "{not json", "log.paths"),
        ("log", "paths", "[[{}]]", "log.paths"),
        ("blame", "path", '["k0",{}]', "blame.path"),
        ("conflicts", "base", "{not json", "conflicts.base"),
        ("writer_requests", "paths", "7", "writer_requests.paths"),
        ("log", "time", "yesterday", "log.time"),
    ],
)
def test_the_message_says_what_is_damaged(
    tmp_path: FilePath, table: str, column: str, value: str, named: str
) -> None:
    file = tmp_path / "state.db"
    make_state_file(file)
    conn = sqlite3.connect(file, isolation_level=None)
    key = "path" if table == "blame" else "rowid"  # blame is WITHOUT ROWID: keyed by path
    conn.execute(
        f"UPDATE {table} SET {column} = ? WHERE {key} = (SELECT max({key}) FROM {table})", (value,)
    )
    conn.close()
    with pytest.raises(StorageError) as info:
        read_everything(file)
    assert named in str(info.value)
    assert info.value.details["file"] == str(file)
    assert "damaged" in str(info.value)
