"""Compaction's fold on the PostgreSQL store: the same reads and refusals as on SQLite.

Only the rows' updates and the last row's token are read; damage to the folded rows
is refused with nothing changed, and a fold keeps the content and the token.
"""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
import pytest

from crdt_state import SharedState, StorageError
from crdt_state._pg_reads import compact
from crdt_state.postgres import open_postgres

_keys = itertools.count()


def filled(dsn: str, commits: int) -> tuple[str, dict[str, Any], Any]:
    """A new key holding ``commits`` log rows; its content and token."""
    key = f"fold-{next(_keys)}"
    state: SharedState = open_postgres(dsn, key, keep_history=100_000)
    for i in range(commits):
        state.commit({f"k{i % 5}": i}, state.token, "ann")
    content, token = state.snapshot(), state.token
    state.close()
    return key, content, token


def table(conn: psycopg.Connection[Any], name: str, key: str) -> list[Any]:
    return conn.execute(
        f"SELECT * FROM crdt_store_{name} WHERE key = %s ORDER BY seq", (key,)
    ).fetchall()


def no_hook(_: psycopg.Connection[Any]) -> None:
    """The store's ``before_commit`` hook (a cluster's fence check); none here."""


def test_a_fold_keeps_content_and_token(throwaway_postgres: str) -> None:
    key, content, token = filled(throwaway_postgres, 12)
    with psycopg.connect(throwaway_postgres) as conn:
        assert compact(conn, key, 8, None, no_hook, measure=False) is False
        assert [r[1] for r in table(conn, "log", key)] == [9, 10, 11, 12]
        assert compact(conn, key, 8, None, no_hook, measure=False) is None  # nothing left
    again = open_postgres(throwaway_postgres, key)
    assert again.snapshot() == content and again.token == token
    again.close()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("UPDATE crdt_store_log SET doc_update = '\\x00ff7788'::bytea WHERE key = %s AND seq = 5",
         "damaged"),
        ("UPDATE crdt_store_log SET doc_update = (SELECT doc_update FROM crdt_store_log"
         " WHERE key = %s AND seq = 4) WHERE key = %s AND seq = 5", "does not match its token"),
        ("DELETE FROM crdt_store_log WHERE key = %s AND seq = 6", "gap"),
        ("UPDATE crdt_store_log SET token = '\\xff'::bytea WHERE key = %s AND seq = 8",
         "log.token of row 8"),
    ],
    ids=["garbage-update", "repeated-update", "missing-row", "undecodable-token"],
)  # fmt: skip
def test_damage_in_the_folded_rows_is_refused_untouched(
    throwaway_postgres: str, damage: str, message: str
) -> None:
    key, _, _ = filled(throwaway_postgres, 12)
    with psycopg.connect(throwaway_postgres, autocommit=True) as conn:
        conn.execute(damage, (key,) * damage.count("%s"))
        before = table(conn, "log", key), table(conn, "snapshot", key)
        with pytest.raises(StorageError, match=message):
            compact(conn, key, 8, None, no_hook, measure=False)
        assert (table(conn, "log", key), table(conn, "snapshot", key)) == before
