"""Format 2 state files (blame and request ids with a second b-tree each) open and upgrade.

The old file is made by this test: a state is written with real rows (history,
blame, conflicts, request ids, a request that wrote nothing), then its ``blame``
and ``writer_requests`` tables are rebuilt in the format-2 shape, rows and their
order kept, and the file is marked format 2.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from crdt_state import SharedState, resolvers
from crdt_state._sqlite_file import FORMAT_VERSION

_FORMAT_2_BLAME = (
    "CREATE TABLE blame (path TEXT PRIMARY KEY, seq INTEGER NOT NULL, agent TEXT,"
    " time REAL NOT NULL, token BLOB NOT NULL)"
)
_FORMAT_2_REQUESTS = (
    "CREATE TABLE writer_requests (writer TEXT NOT NULL, id INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, token BLOB NOT NULL, paths TEXT NOT NULL, clean INTEGER NOT NULL,"
    " UNIQUE (writer, id))"
)


def _write_state(file: Path) -> None:
    """A state with history, blame, a conflict and requests of two writers."""
    state = SharedState.open(file)
    state.commit({"customer": {"tier": "free", "name": "Ada"}}, state.token, "setup")
    base = state.token
    state.commit({("customer", "tier"): "pro"}, base, "a", request_id=1, writer="w1")
    state.commit(
        {("customer", "tier"): "team"},
        base,
        "b",
        request_id=1,
        writer="w2",
        resolvers={("customer", "tier"): resolvers.last_writer_wins},
    )
    state.commit({("customer", "name"): "Ada L."}, state.token, "a", request_id=2, writer="w1")
    state.commit({("customer", "name"): "Ada L."}, state.token, "b", request_id=2, writer="w2")
    state.close()


def _as_format_2(file: Path) -> None:
    """Rebuild blame and writer_requests as format 2 kept them (rows in rowid order)."""
    with closing(sqlite3.connect(file)) as conn, conn:
        for table, create in (("blame", _FORMAT_2_BLAME), ("writer_requests", _FORMAT_2_REQUESTS)):
            conn.execute(f"ALTER TABLE {table} RENAME TO new_{table}")
            conn.execute(create)
            order = "rowid" if table == "writer_requests" else "seq"
            conn.execute(f"INSERT INTO {table} SELECT * FROM new_{table} ORDER BY {order}")
            conn.execute(f"DROP TABLE new_{table}")
        conn.execute("PRAGMA user_version=2")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'format'")


def _rows(file: Path) -> dict[str, list[Any]]:
    with closing(sqlite3.connect(file)) as conn:
        return {
            "log": conn.execute("SELECT * FROM log ORDER BY seq").fetchall(),
            "blame": conn.execute("SELECT * FROM blame ORDER BY path").fetchall(),
            "requests": conn.execute("SELECT * FROM writer_requests ORDER BY rowid").fetchall(),
            "conflicts": conn.execute("SELECT * FROM conflicts ORDER BY id").fetchall(),
            "snapshot": conn.execute("SELECT * FROM snapshot").fetchall(),
        }


def _schema(file: Path) -> dict[str, str]:
    with closing(sqlite3.connect(file)) as conn:
        found = conn.execute("SELECT name, coalesce(sql, '') FROM sqlite_master").fetchall()
    return dict(found)


def test_a_format_2_file_keeps_every_row_and_is_written_in_the_new_format(
    tmp_path: Path,
) -> None:
    file = tmp_path / "old.db"
    _write_state(file)
    _as_format_2(file)
    before = _rows(file)
    assert len(before["requests"]) == 4 and len(before["blame"]) >= 2 and before["conflicts"]
    assert "sqlite_autoindex_writer_requests_1" in _schema(file)  # really the old shape

    reader = SharedState.open(file, read_only=True)  # readers read format 2 as it is
    assert reader.get(("customer", "tier")) == "team"
    old_history = [(e.seq, e.agent, e.paths) for e in reader.history()]
    old_blame = reader.blame(("customer", "tier"))
    reader.close()
    assert _rows(file) == before

    state = SharedState.open(file)
    assert _rows(file) == before  # the upgrade kept every row, requests in their order
    with closing(sqlite3.connect(file)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION == 3
        meta = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        assert meta == ("3",)
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0  # old pages released
    schema = _schema(file)
    assert "WITHOUT ROWID" in schema["blame"]
    assert "UNIQUE" not in schema["writer_requests"]
    assert not [name for name in schema if "writer_requests" in name and name != "writer_requests"]
    assert not [name for name in schema if name.startswith("old_")]

    history = [(e.seq, e.agent, e.paths) for e in state.history()]
    assert history == old_history and [h[1] for h in history] == ["setup", "a", "b", "a", "b"]
    assert state.blame(("customer", "tier")) == old_blame is not None
    blame = state.blame(("customer", "name"))
    assert blame is not None and (blame.agent, blame.seq) == ("b", 5)
    assert [c.path for c in state.conflicts()] == [("customer", "tier")]
    resent = state.commit({("customer", "tier"): "x"}, state.token, "a", request_id=1, writer="w1")
    assert resent.applied == (("customer", "tier"),)  # answered as first applied
    assert state.get(("customer", "tier")) == "team"  # not applied again
    state.commit({("customer", "name"): "Ada"}, state.token, "a", request_id=3, writer="w1")
    state.close()

    after = _rows(file)
    assert after["requests"][:4] == before["requests"]
    assert after["requests"][4][:2] == ("w1", 3)
    assert after["conflicts"] == before["conflicts"]
    reopened = SharedState.open(file)  # a format-3 file opens as it is
    again = reopened.commit(
        {("customer", "name"): "?"}, reopened.token, "a", request_id=3, writer="w1"
    )
    assert again.applied == (("customer", "name"),) and reopened.get(("customer", "name")) == "Ada"
    reopened.close()
    assert _rows(file)["requests"] == after["requests"]


def test_a_new_file_has_one_b_tree_for_blame_and_none_beside_the_requests(tmp_path: Path) -> None:
    file = tmp_path / "new.db"
    state = SharedState.open(file)
    state.commit({"n": 1}, state.token, "a", request_id=7, writer="w")
    state.close()
    with closing(sqlite3.connect(file)) as conn:
        assert conn.execute("PRAGMA index_list(writer_requests)").fetchall() == []
        blame = conn.execute("PRAGMA index_list(blame)").fetchall()
    assert [row[3] for row in blame] == ["pk"]  # the primary key: the table itself
    assert "WITHOUT ROWID" in _schema(file)["blame"]
    assert _rows(file)["requests"][0][:2] == ("w", 7)


def test_the_log_token_index_of_older_files_is_dropped_and_at_still_finds_tokens(
    tmp_path: Path,
) -> None:
    file = tmp_path / "indexed.db"
    state = SharedState.open(file)
    tokens = []
    for n in range(5):
        state.commit({"n": n}, state.token, agent="a")
        tokens.append(state.token)
    state.close()
    assert "log_token" not in _schema(file)  # new files have none
    with closing(sqlite3.connect(file)) as conn:  # as crdt-state 0.1 wrote them
        conn.execute("CREATE INDEX log_token ON log (token)")
    reader = SharedState.open(file, read_only=True)  # a reader leaves the file as it is
    assert reader.at(tokens[2]) == {"n": 2}
    reader.close()
    assert "log_token" in _schema(file)
    state = SharedState.open(file)
    assert "log_token" not in _schema(file)
    assert [state.at(t) for t in tokens] == [{"n": n} for n in range(5)]
    state.close()
