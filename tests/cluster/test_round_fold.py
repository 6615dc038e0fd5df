"""A shared writer's round folded into one statement (``crdt_state._pg_fold``).

Pure checks of which rounds fold, then real PostgreSQL (a throwaway database with the
cluster's tables): the hub's fence check folded with log, blame and request rows writes
all of them, and the rooms' positions, exactly when every fence holds, and nothing at
all otherwise (whatever mix of fresh and stale fences a round holds); a hub's writer
sends a clean round as that one statement.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt_state import _pg_log as pglog
from crdt_state import _pg_round
from crdt_state._pg_fold import FoldableCheck, FoldedCheck, folded
from crdt_state.postgres import SharedWriter, load_stored, open_postgres
from sync.server.cluster.pgstorage import FencedPositions, PositionHook

_LOG = (pglog.INSERT_LOG, [("k", 1, b"t", b"u", "a", "o", 0.0, "[]")])
_BLAME = (pglog.UPSERT_BLAME, [("k", '["x"]', 1, "a", 0.0, b"t")])


def test_only_rounds_of_known_statements_each_once_fold() -> None:
    one = folded([_LOG, _BLAME], None)
    assert one is not None
    sql, params = one
    assert sql.startswith("WITH _ok AS (SELECT true AS yes)")
    assert sql.endswith("SELECT yes FROM _ok")
    assert sql.count("INSERT INTO") == 2 and sql.count("WHERE _ok.yes") == 2
    assert len(params) == 8 + 6  # one array per column
    assert folded([_LOG, _BLAME, _LOG], None) is None  # a table's rows split in two
    snapshot = ("INSERT INTO crdt_store_snapshot (key, seq) VALUES (%s, %s)", [("k", 1)])
    assert folded([_LOG, snapshot], None) is None  # a statement with no unnest form


def test_the_check_comes_first_and_gates_its_own_writes() -> None:
    check = FoldedCheck("SELECT 1 AS room", ["locks"], 3, "UPDATE t SET x = 1", ["writes"])
    one = folded([_LOG], check)
    assert one is not None
    sql, params = one
    assert sql.index("_c AS (SELECT 1") < sql.index("_ok AS") < sql.index("_w AS (UPDATE")
    assert params[:3] == ["locks", 3, "writes"]


def test_the_hub_check_folds_position_hooks_only() -> None:
    check = FencedPositions()
    assert isinstance(check, FoldableCheck)
    a, b = PositionHook("r1", 4), PositionHook("r2", 7)
    a.committed("4-9")
    fold = check.fold([(b, 1), (a, 2), (a, 3)])
    assert fold is not None
    assert fold.lock_params == (["r1", "r2"], [4, 7]) and fold.expected == 2
    assert fold.write_params == (["r1", "r2"], ["4-9", None])
    assert check.fold([(a, 1), (lambda conn, ticket: None, 2)]) is None


@pytest.fixture(scope="module")
def rooms_db(postgres_dsn: str) -> str:
    """The cluster's database with three rooms' rows and their store tables."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for n in range(3):
            conn.execute(
                "INSERT INTO crdt_rooms (room, fence, owner) VALUES (%s, 5, 'hub')"
                " ON CONFLICT (room) DO NOTHING",
                (f"fold-{n}",),
            )
    open_postgres(postgres_dsn, "fold-tables").close()  # the store's tables exist
    return postgres_dsn


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    claims=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([4, 5, 6])), min_size=1, max_size=4
    ),
    rows=st.integers(1, 5),
)
def test_a_folded_round_writes_everything_iff_every_fence_holds(
    rooms_db: str, claims: list[tuple[int, int]], rows: int
) -> None:
    key = f"fold-{secrets.token_hex(4)}"
    position = f"p-{secrets.token_hex(2)}"
    hooks: list[tuple[Any, int]] = []
    for ticket, (room, fence) in enumerate(claims):
        hook = PositionHook(f"fold-{room}", fence)
        hook.committed(position)
        hooks.append((hook, ticket))
    check = FencedPositions().fold(hooks)
    assert check is not None
    log = [(key, seq, b"t", b"u", "a", "o", 0.0, "[]") for seq in range(1, rows + 1)]
    blame = [(key, f'["p{seq}"]', seq, "a", 0.0, b"t") for seq in range(1, rows + 1)]
    requests = [(key, "w", seq, seq, b"t", "[]", True) for seq in range(1, rows + 1)]
    statements: list[tuple[str, Sequence[Sequence[Any]]]] = [
        (pglog.INSERT_LOG, log),
        (pglog.UPSERT_BLAME, blame),
        (pglog.UPSERT_REQUEST, requests),
    ]
    one = folded(statements, check)
    assert one is not None
    holds = all(fence == 5 for _, fence in claims)
    with psycopg.connect(rooms_db, autocommit=True) as conn:
        written = conn.execute(one[0], one[1]).fetchone()
        counts = [
            conn.execute(f"SELECT count(*) FROM {table} WHERE key = %s", (key,)).fetchone()
            for table in ("crdt_store_log", "crdt_store_blame", "crdt_store_requests")
        ]
        moved = conn.execute(
            "SELECT room FROM crdt_rooms WHERE stream_position = %s ORDER BY room", (position,)
        ).fetchall()
    assert written == (holds,)
    assert counts == [(rows if holds else 0,)] * 3
    touched = sorted({f"fold-{room}" for room, _ in claims})
    assert [room for (room,) in moved] == (touched if holds else [])


def test_a_hub_writer_sends_a_clean_round_as_one_statement(
    rooms_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[bool] = []

    def spy(statements: Any, check: FoldedCheck | None) -> tuple[str, list[Any]] | None:
        one = folded(statements, check)
        sent.append(one is not None and check is not None)
        return one

    monkeypatch.setattr(_pg_round, "folded", spy)
    writer = SharedWriter(rooms_db, check=FencedPositions())
    hook = PositionHook("fold-0", 5)
    hook.committed("5-1")
    state = open_postgres(rooms_db, "fold-0", before_commit=hook, writer=writer)
    try:
        state.commit({"n": 1}, state.token, "agent")
        assert sent and all(sent)
        stored = load_stored(rooms_db, "fold-0")
        assert stored is not None and [c.agent for c in stored.changes] == ["agent"]
    finally:
        state.close()
        writer.close()
