"""A ``local`` file misused: shared by two clients at once, or reused for another room.

Both used to lose or corrupt data silently: two clients on one file shared its writer id
and request ids (the hub deduplicated one client's merges away), and a file reused for
another room copied its replica and its queued merges into that room. Both are refused
at once with a typed error, before anything is sent or written; real hubs on loopback,
real files, and a real second process.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hubs import FAST, SECRET, free_port

import sync
from crdt_state.file_locks import NoProcessLock
from sync import Hub, RemoteState, connect, connect_blocking

ROOT = Path(__file__).resolve().parents[3]

# holds FILE open in a process of its own until told (a line on stdin) or killed
HOLDER = """
import sys
import sync
url, local = sys.argv[1], sys.argv[2]
with sync.connect_blocking(url, agent="P", local=local, timeout=5) as remote:
    remote.commit({"from_p": 1}, remote.token)
    print("ready", flush=True)
    sys.stdin.readline()
"""


def _rows(file: Path) -> list[str]:
    """The content of a local file (every table's rows), read without writing to it."""
    with contextlib.closing(sqlite3.connect(f"file:{file}?mode=ro", uri=True)) as db:
        return list(db.iterdump())


def _holder(url: str, local: Path) -> subprocess.Popen[str]:
    """A second process holding ``local`` (connected to ``url``), once it said so."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(local)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        pytest.fail(f"the holder process did not start: {line!r}, exit {proc.wait()}")
    return proc


def _check_in_use(error: BaseException, local: Path, pid: int | None) -> None:
    assert isinstance(error, sync.LocalFileInUse) and isinstance(error, sync.LocalFileError)
    assert error.code == "local_file_in_use"
    assert error.file == str(local) and str(local) in str(error)
    if sys.platform == "linux" or pid == os.getpid():  # where the system tells the holder
        assert error.pid == pid and f"pid {pid}" in str(error)


# -- one client at a time ----------------------------------------------------------------------
async def test_a_second_client_on_a_held_local_file_is_refused_at_once(
    hub: Hub, tmp_path: Path
) -> None:
    """The user's case: P and Q on one file, in one process; Q is refused, P goes on."""
    local, url = tmp_path / "shared.db", hub.url("shared")
    async with connect(url, agent="P", local=local, reconnect=FAST) as p:
        await p.acommit({"p0": 1}, p.token)
        before, sessions = _rows(local), len(hub.rooms["shared"].sessions)
        started = time.monotonic()
        with pytest.raises(sync.SyncError) as refused:
            async with connect(url, agent="Q", local=local, reconnect=FAST):
                pytest.fail("a second client opened a held local file")
        assert time.monotonic() - started < 1.0  # at once: no waiting for a lock
        _check_in_use(refused.value, local, os.getpid())
        assert "this process" in str(refused.value)
        # nothing was sent, connected or written by the refused client
        assert len(hub.rooms["shared"].sessions) == sessions
        assert _rows(local) == before
        result = await p.acommit({"p1": 1}, p.token)  # P is not disturbed
        assert result.applied == (("p1",),)
    # closed: the file is free again, for one client, with P's writer id and replica
    async with connect(url, agent="Q", local=local, reconnect=FAST) as q:
        assert q.snapshot() == {"p0": 1, "p1": 1}
        await q.acommit({"q0": 1}, q.token)
    assert hub.rooms["shared"].state.snapshot() == {"p0": 1, "p1": 1, "q0": 1}


def test_the_blocking_client_is_refused_the_same_way(hub_url: str, tmp_path: Path) -> None:
    local, url = tmp_path / "shared.db", f"{hub_url}/blocking"
    with connect_blocking(url, agent="P", local=local, reconnect=FAST) as p:
        p.commit({"p": 1}, p.token)
        before = _rows(local)
        with pytest.raises(sync.SyncError) as refused:
            connect_blocking(url, agent="Q", local=local, reconnect=FAST)
        _check_in_use(refused.value, local, os.getpid())
        assert _rows(local) == before
    with connect_blocking(url, agent="Q", local=local, reconnect=FAST) as q:
        assert q.snapshot() == {"p": 1}


def test_a_local_file_held_by_another_process_is_refused_until_that_process_dies(
    hub_url: str, tmp_path: Path
) -> None:
    local, url = tmp_path / "shared.db", f"{hub_url}/processes"
    proc = _holder(url, local)
    try:
        before = _rows(local)
        with pytest.raises(sync.SyncError) as refused:
            connect_blocking(url, agent="Q", local=local, reconnect=FAST)
        _check_in_use(refused.value, local, proc.pid)
        assert "this process" not in str(refused.value)
        assert _rows(local) == before
    finally:
        proc.kill()  # a crash: the holder never closes its client
        proc.wait(10)
    # the lock died with the process: the file serves the next client, with P's write
    with connect_blocking(url, agent="Q", local=local, reconnect=FAST) as q:
        assert q.get("from_p") == 1
        q.commit({"from_q": 1}, q.token)
        assert q.snapshot() == {"from_p": 1, "from_q": 1}


async def test_a_client_that_fails_to_start_leaves_its_file_free(
    secured: Hub, tmp_path: Path
) -> None:
    local = tmp_path / "a.db"
    for _ in range(2):  # the second attempt meets the token's refusal again, not a lock
        with pytest.raises(sync.AuthError):
            async with connect(secured.url("room"), agent="a", token="nope", local=local):
                pass
    token = sync.mint_token(SECRET, "room", "write", 60)
    async with connect(secured.url("room"), agent="a", token=token, local=local) as remote:
        assert remote.connected


async def test_without_flock_a_second_client_of_this_process_is_still_refused(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on Windows (no ``fcntl``): a warning, no process lock, this process still knows."""
    local, url = tmp_path / "a.db", hub.url("room")
    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl raises ImportError
    with pytest.warns(NoProcessLock, match="not locked against clients in other processes"):
        first = RemoteState(url, agent="P", local=local, reconnect=FAST)
    try:
        with pytest.raises(sync.LocalFileInUse) as refused:
            RemoteState(url, agent="Q", local=local, reconnect=FAST)
        _check_in_use(refused.value, local, os.getpid())
        assert refused.value.this_process
        monkeypatch.undo()
        await first.start()
        await first.acommit({"p": 1}, first.token)
    finally:
        await first.close()
    async with connect(url, agent="Q", local=local, reconnect=FAST) as again:
        assert again.snapshot() == {"p": 1}


# -- one room per file ---------------------------------------------------------------------------
async def test_a_local_file_is_refused_for_another_room(hub: Hub, tmp_path: Path) -> None:
    """Room one's queued merge and replica stay in the file and never reach room two."""
    local = tmp_path / "reuse.db"
    async with connect(hub.url("room/one"), agent="a", local=local, reconnect=FAST) as one:
        await one.acommit({"kept": "one"}, one.token)
    dead = f"ws://127.0.0.1:{free_port()}/room/one"  # room one, offline: a merge queued
    async with connect(dead, agent="a", local=local, reconnect=FAST, timeout=0.2) as offline:
        assert (await offline.acommit({"queued": "one"}, offline.token)).pending
    before = _rows(local)
    for urls in (hub.url("room/two"), [hub.url("room/two"), f"ws://localhost:{hub.port}/room/two"]):
        with pytest.raises(sync.SyncError) as refused:
            async with connect(urls, agent="b", local=local, reconnect=FAST):
                pytest.fail("a local file opened for another room")
        error = refused.value
        assert isinstance(error, sync.LocalFileWrongRoom)
        assert isinstance(error, sync.LocalFileError)
        assert error.code == "local_file_wrong_room"
        assert (error.file, error.room, error.file_room) == (str(local), "room/two", "room/one")
        for named in (str(local), "'room/two'", "'room/one'"):
            assert named in str(error)
        assert _rows(local) == before  # nothing changed in the file
        assert "room/two" not in hub.rooms  # nothing sent: room two was never joined
    # the file is not held after a refusal; its own room takes it, through any host
    other_host = f"ws://localhost:{hub.port}/room/one"
    async with connect(other_host, agent="a", local=local, reconnect=FAST) as again:
        await again.wait_idle(5)
        assert again.failed == []
        assert again.snapshot() == {"kept": "one", "queued": "one"}
    assert hub.rooms["room/one"].state.snapshot() == {"kept": "one", "queued": "one"}
    assert "room/two" not in hub.rooms


def test_the_blocking_client_is_refused_another_room(hub_url: str, tmp_path: Path) -> None:
    local = tmp_path / "reuse.db"
    with connect_blocking(f"{hub_url}/one", agent="a", local=local, reconnect=FAST) as one:
        one.commit({"kept": "one"}, one.token)
    before = _rows(local)
    with pytest.raises(sync.SyncError) as refused:
        connect_blocking(f"{hub_url}/two", agent="a", local=local, reconnect=FAST)
    assert refused.value.code == "local_file_wrong_room"
    assert _rows(local) == before
    with connect_blocking(f"{hub_url}/two", agent="b", reconnect=FAST) as two:
        assert two.snapshot() == {}


async def test_a_file_from_before_rooms_were_recorded_is_adopted_by_its_first_room(
    hub: Hub, tmp_path: Path
) -> None:
    local = tmp_path / "old.db"
    async with connect(hub.url("first"), agent="a", local=local, reconnect=FAST) as remote:
        await remote.acommit({"x": 1}, remote.token)
    with contextlib.closing(sqlite3.connect(local)) as db:  # as an earlier version left it
        db.execute("DELETE FROM meta WHERE key = 'room'")
        db.commit()
    async with connect(hub.url("first"), agent="a", local=local, reconnect=FAST) as remote:
        assert remote.snapshot() == {"x": 1}  # its writer id, replica and queue are kept
    with pytest.raises(sync.SyncError) as refused:
        async with connect(hub.url("second"), agent="a", local=local, reconnect=FAST):
            pass
    assert refused.value.code == "local_file_wrong_room"
    assert isinstance(refused.value, sync.LocalFileWrongRoom)
    assert refused.value.file_room == "first"


async def test_a_local_file_that_cannot_be_opened_is_a_typed_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a SQLite file, only text " * 10)
    for local, said in ((tmp_path / "no" / "dir.db", "No such file"), (junk, "not a database")):
        with pytest.raises(sync.LocalFileError) as info:
            async with sync.connect("ws://127.0.0.1:1/r", agent="a", local=local, timeout=1):
                pass
        assert info.value.code == "local_file_error" and said in str(info.value)
    assert junk.read_bytes() == b"not a SQLite file, only text " * 10
