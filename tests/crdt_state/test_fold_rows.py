"""Compaction's fold (crdt_state._fold): only the updates and the last token are read.

The rows folded away are replayed without decoding each row's token; the document
they give must still carry the last row's token, so a damaged, missing or repeated
update is refused (nothing changes), a damaged last token is named by its seq, and a
history folded in any number of steps loads back to the same content and token.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from pathlib import Path as FilePath
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt_state import MISSING, SharedState, StorageError
from crdt_state import _sqlite_log as sqllog
from crdt_state._document import doc_snapshot
from crdt_state._sqlite_reads import compact, replay

_names = itertools.count()


def build(tmp_path: FilePath, commits: list[dict[str, Any]]) -> FilePath:
    """A closed state file holding ``commits`` (one log row each), nothing compacted."""
    file = tmp_path / f"fold-{next(_names)}.db"
    state = SharedState.open(file, keep_history=100_000, durability="off")
    for i, changes in enumerate(commits):
        state.commit(changes, state.token, f"agent{i % 3}")
    state.close()
    return file


def digest(conn: sqlite3.Connection) -> str:
    rows = [conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("snapshot", "log")]
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def whole(conn: sqlite3.Connection) -> tuple[dict[str, Any], Any]:
    """Content and token of the file, every row's token checked (as reopening does)."""
    stored = sqllog.load(conn)
    doc = replay(stored)
    token = stored.changes[-1].token if stored.changes else stored.snapshot_token
    return doc_snapshot(doc), token


def counter_commits(n: int) -> list[dict[str, Any]]:
    return [{f"k{i % 5}": i} for i in range(n)]


steps = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.integers(-9, 9), st.text(max_size=3), st.just(MISSING)),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=steps, cuts=st.lists(st.integers(1, 40), min_size=1, max_size=4))
def test_folding_in_any_steps_keeps_content_and_token(
    tmp_path: FilePath, history: list[tuple[str, Any]], cuts: list[int]
) -> None:
    commits = [{key: value} for key, value in history]
    file = build(tmp_path, commits)
    conn = sqlite3.connect(file, isolation_level=None)
    try:
        before = whole(conn)
        rows = len(conn.execute("SELECT seq FROM log").fetchall())
        for cut in sorted(cuts):
            if cut <= rows:
                compact(conn, cut, None, measure=False)
        assert whole(conn) == before  # every remaining row's token still checks out
        kept = conn.execute("SELECT min(seq) FROM log").fetchone()[0]
        folded = max([c for c in cuts if c <= rows], default=0)
        assert kept == (folded + 1 if folded < rows else None)
    finally:
        conn.close()


def test_nothing_to_fold_changes_nothing(tmp_path: FilePath) -> None:
    conn = sqlite3.connect(build(tmp_path, counter_commits(4)), isolation_level=None)
    try:
        compact(conn, 3, None, measure=False)
        before = digest(conn)
        assert compact(conn, 3, None, measure=False) is None
        assert digest(conn) == before
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("UPDATE log SET doc_update = x'00ff7788' WHERE seq = 5", "damaged"),
        (
            "UPDATE log SET doc_update = (SELECT doc_update FROM log WHERE seq = 4) WHERE seq = 5",
            "does not match its token",
        ),
        (
            "UPDATE log SET token = (SELECT token FROM log WHERE seq = 3) WHERE seq = 8",
            "does not match its token",
        ),
        ("DELETE FROM log WHERE seq = 6", "gap"),
        ("UPDATE log SET token = x'ff' WHERE seq = 8", "log.token of row 8"),
    ],
    ids=["garbage-update", "repeated-update", "last-token", "missing-row", "undecodable-token"],
)
def test_damage_in_the_folded_rows_is_refused_untouched(
    tmp_path: FilePath, damage: str, message: str
) -> None:
    conn = sqlite3.connect(build(tmp_path, counter_commits(12)), isolation_level=None)
    try:
        conn.execute(damage)  # after the state was loaded and checked: the file went bad
        before = digest(conn)
        with pytest.raises(StorageError, match=message):
            compact(conn, 8, None, measure=False)
        assert digest(conn) == before
    finally:
        conn.close()


def test_the_precise_error_names_the_row_whose_token_does_not_match(tmp_path: FilePath) -> None:
    conn = sqlite3.connect(build(tmp_path, counter_commits(12)), isolation_level=None)
    try:
        conn.execute("UPDATE log SET doc_update = (SELECT doc_update FROM log WHERE seq = 4)"
                     " WHERE seq = 5")  # fmt: skip
        with pytest.raises(StorageError) as caught:
            compact(conn, 8, None, measure=False)
        assert caught.value.details["seq"] == 5
    finally:
        conn.close()


def test_a_damaged_token_in_the_middle_is_folded_away(tmp_path: FilePath) -> None:
    """Only the last row's token becomes the snapshot's: a middle one is not read."""
    conn = sqlite3.connect(build(tmp_path, counter_commits(12)), isolation_level=None)
    try:
        content, token = whole(conn)
        conn.execute("UPDATE log SET token = x'ff' WHERE seq = 5")
        compact(conn, 8, None, measure=False)
        assert whole(conn) == (content, token)
        assert conn.execute("SELECT min(seq) FROM log").fetchone()[0] == 9
    finally:
        conn.close()


def test_a_gap_names_the_missing_seq(tmp_path: FilePath) -> None:
    conn = sqlite3.connect(build(tmp_path, counter_commits(12)), isolation_level=None)
    try:
        conn.execute("DELETE FROM log WHERE seq IN (6, 7)")
        with pytest.raises(StorageError) as caught:
            compact(conn, 8, None, measure=False)
        assert caught.value.details == {"expected_seq": 6, "found_seq": 8}
    finally:
        conn.close()
