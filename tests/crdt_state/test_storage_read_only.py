"""``SharedState.open(path, read_only=True)``: no lock, no write, readable beside a writer.

A real state file is held by a writer (in this process, and in another process) while a
read-only state reads it: the reader sees what the writer committed, its history queries
follow the writer, every write raises :class:`ReadOnlyStore` before anything changes,
and the file's bytes stay as they were.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path as FilePath

import pytest

from crdt_state import ReadOnlyStore, SharedState, StorageError
from crdt_state.storage import SqliteStore

ROOT = FilePath(__file__).resolve().parents[2]


def digest(file: FilePath) -> tuple[str, int]:
    return hashlib.sha256(file.read_bytes()).hexdigest(), file.stat().st_mtime_ns


def test_a_reader_sees_what_a_writer_in_this_process_commits(tmp_path: FilePath) -> None:
    file = tmp_path / "live.db"
    writer = SharedState.open(file)
    writer.commit({"a": 1}, writer.token, "w")
    reader = SharedState.open(file, read_only=True)
    try:
        assert reader.snapshot() == {"a": 1} and reader.token == writer.token
        writer.commit({"b": 2}, writer.token, "w")  # the writer keeps its file
        assert [e.seq for e in reader.history()] == [1, 2]  # queries read the file now
        assert reader.at(writer.token) == {"a": 1, "b": 2}
        assert reader.blame("b") is not None and reader.blame("b").agent == "w"  # type: ignore[union-attr]
    finally:
        reader.close()
        writer.close()
    again = SharedState.open(file)  # the reader held nothing: the file opens for writing
    assert again.snapshot() == {"a": 1, "b": 2}
    again.close()


def test_every_write_raises_read_only_store_and_changes_nothing(tmp_path: FilePath) -> None:
    file = tmp_path / "ro.db"
    with SharedState.open(file) as writer:
        writer.commit({"a": 1}, writer.token, "w")
        update = writer.get_update()
    before = digest(file)
    reader = SharedState.open(file, read_only=True)
    try:
        token = reader.token
        with pytest.raises(ReadOnlyStore) as info:
            reader.commit({"a": 2}, token, "x")
        assert info.value.code == "read_only_store"
        assert info.value.details == {"file": str(file), "reason": "read_only"}
        with pytest.raises(ReadOnlyStore):
            reader.apply_update(update)
        branch = reader.fork("x")
        with pytest.raises(ReadOnlyStore):
            branch.set("a", 3)
        with pytest.raises(ReadOnlyStore):
            reader.transact(lambda b: b.set("c", 1), agent="x")
        store = reader._core.store
        assert isinstance(store, SqliteStore) and store.read_only
        with pytest.raises(ReadOnlyStore):
            store.audit([], token)
        assert reader.snapshot() == {"a": 1} and reader.token == token
        assert [e.seq for e in reader.history()] == [1]
    finally:
        reader.close()
    assert digest(file) == before


def test_a_reader_reads_a_file_another_process_holds(tmp_path: FilePath) -> None:
    file = tmp_path / "held.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "ready 1"
        with pytest.raises(StorageError) as busy:  # a second writer is still refused
            SharedState.open(file)
        assert busy.value.details["reason"] == "open_in_another_process"
        assert busy.value.details["pid"] == holder.pid
        with SharedState.open(file, read_only=True) as reader:
            assert reader.snapshot() == {"n": 1}
        holder.stdin.write("more\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "ready 2"
        with SharedState.open(file, read_only=True) as reader:  # the WAL's newest commit
            assert reader.snapshot() == {"n": 2}
            assert [e.agent for e in reader.history()] == ["holder", "holder"]
    finally:
        holder.kill()
        holder.communicate()


HOLDER = textwrap.dedent(
    """
    import sys
    from crdt_state import SharedState
    state = SharedState.open(sys.argv[1])
    state.commit({"n": 1}, state.token, "holder")
    print("ready 1", flush=True)
    sys.stdin.readline()
    state.commit({"n": 2}, state.token, "holder")
    print("ready 2", flush=True)
    sys.stdin.readline()
    """
)


def test_missing_and_foreign_files_are_refused_untouched(tmp_path: FilePath) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(StorageError) as info:
        SharedState.open(missing, read_only=True)
    assert info.value.details == {"file": str(missing), "reason": "missing"}
    assert not missing.exists()  # not created
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all")
    with pytest.raises(StorageError) as info:
        SharedState.open(text, read_only=True)
    assert info.value.details["reason"] == "not_a_state_file"
    assert text.read_text() == "not a database at all"
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = digest(foreign)
    with pytest.raises(StorageError, match="not a crdt-state file") as info:
        SharedState.open(foreign, read_only=True)
    assert info.value.details["reason"] == "not_a_state_file"
    assert digest(foreign) == before


def test_reading_a_closed_file_leaves_its_bytes_alone(tmp_path: FilePath) -> None:
    file = tmp_path / "quiet.db"
    with SharedState.open(file, keep_history=5) as writer:
        for i in range(20):  # compacted: a snapshot and a log
            writer.commit({"i": i}, writer.token, f"a{i % 3}")
    before = digest(file)
    time.sleep(0.01)  # a write now would show in the mtime
    with SharedState.open(file, read_only=True) as reader:
        assert reader.get("i") == 19
        assert len(reader.history()) >= 5
        assert reader.conflicts() == []
    assert digest(file) == before


def test_a_file_in_a_directory_the_reader_cannot_write_is_read_as_it_is(
    tmp_path: FilePath, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's WAL readers create ``-shm`` beside the file: a user who may not write the
    directory got "not a crdt-state file: attempt to write a readonly database". Such a
    file, with no writer's ``-wal`` beside it, is read ``immutable``: nothing is made there.
    (The tests run as root, who may write anywhere: the directory's answer is given.)"""
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    with SharedState.open(shelf / "s.db") as state:
        state.commit({"a": 1}, state.token, "writer")
    before = sorted(p.name for p in shelf.iterdir())
    assert before == ["s.db"]  # closed: no -wal, no -shm left
    access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(shelf) else access(p, mode)
    )
    with SharedState.open(shelf / "s.db", read_only=True) as state:
        assert state.snapshot() == {"a": 1}
    assert sorted(p.name for p in shelf.iterdir()) == before
