"""``crdt-state inspect`` on a room a running hub holds: a real hub process, real agents.

The hub (``python -m sync.cli hub --db DIR``) keeps the room's file open while agents
merge through it; the CLI, run as its own process, shows the latest merged values and
history, and leaves the file's bytes (database and WAL) exactly as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hubs import free_port
from hubs import inspect_cli as cli

from sync.client.remote import connect
from sync.server._store import room_file

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ROOM = "team/live"


def cli_json(*argv: str) -> object:
    done = cli(*argv, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def files_of(db: Path) -> dict[str, tuple[str, int]]:
    """Every file of the room (database, WAL, index): content digest and mtime."""
    base = room_file(db, ROOM)
    found = {}
    for suffix in ("", "-wal"):
        file = Path(str(base) + suffix)
        if file.exists():
            found[suffix or "db"] = (hashlib.sha256(file.read_bytes()).hexdigest(),
                                     file.stat().st_mtime_ns)  # fmt: skip
    return found


async def test_the_cli_reads_a_room_while_the_hub_holds_it(tmp_path: Path) -> None:
    db = tmp_path / "rooms"
    port = free_port()
    hub = subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "hub", "--port", str(port), "--db", str(db),
         "--insecure", "--log-level", "WARNING"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"ws://127.0.0.1:{port}/{ROOM}"
    try:
        async with (
            connect(url, agent="ann", timeout=20) as ann,
            connect(url, agent="bo", timeout=20) as bo,
        ):
            for i in range(10):
                await ann.acommit({f"ann{i}": i}, ann.token)
                await bo.acommit({"shared.count": i, "shared.by": "bo"}, bo.token)
            await ann.wait_idle()
            await bo.wait_idle()
            before = files_of(db)
            assert "-wal" in before  # the newest commits are in the WAL, not yet checkpointed

            shown = cli_json("--db", str(db), ROOM, "show")
            assert isinstance(shown, dict)
            assert shown["value"]["shared"] == {"count": 9, "by": "bo"}
            assert all(shown["value"][f"ann{i}"] == i for i in range(10))
            assert shown["seq"] == 20
            history = cli_json("--db", str(db), ROOM, "history", "--agent", "ann")
            assert isinstance(history, list) and len(history) == 10
            table = cli("--db", str(db), ROOM, "history")
            assert table.returncode == 0 and len(table.stdout.splitlines()) == 2 + 20
            assert files_of(db) == before  # reading wrote nothing, not even the WAL

            await ann.acommit({"after": True}, ann.token)  # the hub still writes its room
            await ann.wait_idle()
            blamed = cli_json("--db", str(db), ROOM, "blame", "after")
            assert isinstance(blamed, dict) and blamed["agent"] == "ann" and blamed["seq"] == 21
    finally:
        hub.terminate()
        hub.communicate(timeout=30)
    assert hub.returncode == 0


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: None, "no state file at"),
        (lambda p: p.write_text("hello"), "not a crdt-state file"),
    ],
    ids=["missing", "not-a-state-file"],
)
def test_a_missing_or_foreign_file_is_a_clear_error(
    tmp_path: Path, make: object, expected: str
) -> None:
    file = tmp_path / "x.sqlite"
    make(file)  # type: ignore[operator]
    done = cli(str(file), "show")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("crdt-state inspect: ") and expected in done.stderr
    assert "Traceback" not in done.stderr
    if file.exists():
        assert file.read_text() == "hello" and "[storage: not_a_state_file]" in done.stderr
