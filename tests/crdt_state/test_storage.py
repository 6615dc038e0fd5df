"""Durable states: reopen, history, time travel, blame, audit, refusals, compaction.

Tests taking ``stores`` run once per store (SQLite file, PostgreSQL key: the storage
contract); the others are about the SQLite file itself (format, damage, locking, size).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sqlite3
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path as FilePath
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt_state import (
    MISSING,
    UNRESOLVED,
    BlameEntry,
    Change,
    ConflictError,
    ConflictRecord,
    CrdtStateError,
    HistoryEntry,
    SharedState,
    StaleBase,
    StorageError,
    UnknownBase,
    VersionVector,
    resolvers,
)

ROOT = FilePath(__file__).resolve().parents[2]
_names = itertools.count()


def fresh(tmp_path: FilePath) -> FilePath:
    """A new file name in ``tmp_path`` (hypothesis reuses the fixture across examples)."""
    return tmp_path / f"state-{next(_names)}.db"


def digest(path: FilePath) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- random histories --------------------------------------------------------------
PATHS = [("a",), ("b",), ("c", "x"), ("c", "y"), ("d",)]
values = st.one_of(
    st.integers(-(2**40), 2**40),
    st.text(max_size=6),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from(["p", "q"]), st.integers(0, 9), max_size=2),
)
ops = st.lists(
    st.tuples(
        st.sampled_from(["ann", "bob", "cy"]),
        st.sampled_from(["set", "set", "delete", "append", "remote"]),
        st.sampled_from(PATHS),
        values,
    ),
    min_size=1,
    max_size=25,
)


def play(state: SharedState, steps: list[tuple[str, str, tuple[str, ...], Any]]) -> list[Any]:
    """Apply ``steps``; return ``[(token, snapshot)]`` after each change that applied."""
    seen = [(state.token, state.snapshot())]
    for agent, kind, path, value in steps:
        try:
            if kind == "remote":  # an update from another replica (another Yjs client)
                other = SharedState()
                other.apply_update(state.get_update())
                other.commit({path: value}, other.token, agent)
                state.apply_update(other.get_update(state.token), origin=agent)
            elif kind == "append":
                state.commit([Change("append", path, [value])], state.token, agent)
            elif kind == "delete":
                state.commit({path: MISSING}, state.token, agent)
            else:
                state.commit({path: value}, state.token, agent)
        except CrdtStateError:  # e.g. append to a scalar: refused, nothing applied
            continue
        if state.token != seen[-1][0]:
            seen.append((state.token, state.snapshot()))
    return seen


quick = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@quick
@given(
    first=ops,
    second=ops,
    keep=st.integers(1, 12),
    durability=st.sampled_from(["full", "normal", "off"]),
)
def test_reopen_restores_content_token_and_history(
    stores: Any, first: Any, second: Any, keep: int, durability: Any
) -> None:
    place = stores.fresh()
    state = place.open(keep_history=keep, durability=durability)
    play(state, first)
    content, token, history = state.snapshot(), state.token, state.history()
    state.close()

    again = place.open(keep_history=keep, durability=durability)
    assert again.snapshot() == content
    assert again.token == token
    assert again.history() == history
    play(again, second)
    content, token = again.snapshot(), again.token
    again.close()

    third = place.open()
    assert (third.snapshot(), third.token) == (content, token)
    third.close()


@quick
@given(steps=ops, keep=st.integers(1, 30))
def test_at_equals_the_snapshot_recorded_at_every_token(stores: Any, steps: Any, keep: int) -> None:
    place = stores.fresh()
    state = place.open(keep_history=keep, durability="off")
    seen = play(state, steps)
    retained = {h.token for h in state.history()}
    for s in (state, None):
        if s is None:  # and again after reopening
            state.close()
            state = place.open(keep_history=keep)
        for token, snapshot in seen:
            try:
                assert state.at(token) == snapshot
            except StaleBase:
                assert token not in retained  # only compacted versions may be refused
    assert retained <= {token for token, _ in seen}  # so every listed version was compared
    assert state.at(state.token) == state.snapshot()
    state.close()


# -- history, blame, time travel -------------------------------------------------
def test_history_lists_changes_with_agents_paths_and_filters(stores: Any) -> None:
    state = stores.fresh().open()
    state.commit({"customer.tier": "gold", "customer.name": "Ada"}, state.token, "ann")
    state.commit({"orders": [1]}, state.token, "bob")
    state.commit({"customer.tier": "silver"}, state.token, "bob")
    history = state.history()
    assert [h.agent for h in history] == ["ann", "bob", "bob"]
    assert all(isinstance(h, HistoryEntry) for h in history)
    assert history[0].paths == (("customer", "tier"), ("customer", "name"))
    assert history[-1].token == state.token
    assert [h.seq for h in history] == [1, 2, 3]
    assert history[0].time <= history[1].time <= history[2].time
    assert [h.agent for h in state.history(agent="bob")] == ["bob", "bob"]
    assert [h.seq for h in state.history(path="customer")] == [1, 3]
    assert [h.seq for h in state.history(path="customer.tier.x")] == [1, 3]
    assert [h.seq for h in state.history(limit=1)] == [3]
    assert state.history(since=history[-1].time + 1) == []
    state.close()


def test_blame_names_the_last_writer_of_a_path_an_ancestor_or_descendant(
    stores: Any,
) -> None:
    place = stores.fresh()
    state = place.open()
    assert state.blame("customer") is None
    state.commit({"customer": {"tier": "gold"}}, state.token, "ann")
    first = state.token
    state.commit({"customer.tier": "silver"}, state.token, "bob")
    state.commit({"other": 1}, state.token, "cy")
    tier = state.blame("customer.tier")
    assert isinstance(tier, BlameEntry)
    assert (tier.agent, tier.path) == ("bob", ("customer", "tier"))
    assert tier.token < state.token
    assert state.at(tier.token) == {"customer": {"tier": "silver"}}
    whole = state.blame("customer")
    assert whole is not None and whole.agent == "bob"  # a descendant changed it last
    state.commit({"customer": {"tier": "bronze"}}, state.token, "cy")
    deep = state.blame("customer.tier")
    assert deep is not None and (deep.agent, deep.path) == ("cy", ("customer",))
    assert state.blame("nobody.here") is None
    assert state.at(first) == {"customer": {"tier": "gold"}}
    state.close()
    reopened = place.open()
    again = reopened.blame("customer.tier")
    assert again is not None and again.agent == "cy" and again.seq == deep.seq
    reopened.close()


def test_at_refuses_unknown_and_compacted_tokens(stores: Any) -> None:
    state = stores.fresh().open(keep_history=5, durability="off")
    tokens = []
    for i in range(200):
        state.commit({f"k{i % 4}": i}, state.token, "ann")
        tokens.append(state.token)
    with pytest.raises(StaleBase):
        state.at(tokens[0])
    with pytest.raises(UnknownBase):
        state.at(VersionVector({123: 5}))
    assert state.at(tokens[-1]) == state.snapshot()
    with pytest.raises(TypeError):
        state.at("not a token")
    state.close()


def test_old_fork_bases_are_judged_after_reopening(stores: Any) -> None:
    place = stores.fresh()
    state = place.open(keep_history=50)
    state.commit({"score": 1}, state.token, "ann")
    base = state.token
    state.commit({"score": 2}, state.token, "bob")
    state.close()
    state = place.open(keep_history=50)
    with pytest.raises(ConflictError) as info:  # bob's write since ``base`` is still known
        state.commit({"score": 3}, base, "cy")
    assert info.value.conflicts[0].current_agent == "bob"
    assert state.get("score") == 2
    for i in range(200):  # push ``base`` out of the retained history
        state.commit({"other": i}, state.token, "ann")
    state.close()
    state = place.open(keep_history=50)
    with pytest.raises(StaleBase):
        state.commit({"score": 3}, base, "cy")
    state.close()


# -- conflict audit --------------------------------------------------------------
def test_conflicts_are_audited_with_resolution_and_survive_reopening(stores: Any) -> None:
    place = stores.fresh()
    options: dict[str, Any] = {
        "resolvers": {"score": resolvers.maximum, "tier": resolvers.first_writer_wins}
    }
    state = place.open(**options)
    state.commit({"score": 1, "tier": "a", "name": "x"}, state.token, "setup")
    base = state.token
    state.commit({"score": 5, "tier": "b", "name": "y"}, state.token, "ann")
    state.commit({"score": 9}, base, "bob")  # max -> 9, written
    state.commit({"tier": "c"}, base, "cy")  # first writer wins -> keeps "b", nothing written
    with pytest.raises(ConflictError):
        state.commit({"name": "z"}, base, "dee")  # no policy: refused
    records = state.conflicts()
    assert all(isinstance(r, ConflictRecord) for r in records)
    assert [(r.path, r.agents) for r in records] == [
        (("score",), ("ann", "bob")),
        (("tier",), ("ann", "cy")),
        (("name",), ("ann", "dee")),
    ]
    score, tier, name = records
    assert (score.base, score.current, score.incoming, score.resolution) == (1, 5, 9, 9)
    assert score.applied and score.policy is not None and "max" in score.policy
    assert (tier.resolution, tier.applied) == ("b", True)
    assert (name.resolution, name.applied) == (UNRESOLVED, False)
    state.close()

    state = place.open(**options)
    assert state.conflicts() == records
    assert state.conflicts(path="score") == [score]
    assert state.conflicts(since=records[-1].time + 1) == []
    assert state.conflicts(since=records[0].time) == records
    state.commit({"gone": 1}, state.token, "ann")
    old = state.token
    state.commit({"gone": MISSING}, state.token, "ann")
    state.commit({"gone": 2}, old, "bob", default=resolvers.last_writer_wins)
    deleted = state.conflicts(path="gone")[0]
    assert (deleted.base, deleted.current, deleted.incoming) == (1, MISSING, 2)
    state.close()


# -- refusing foreign, damaged and busy files ------------------------------------
def make_file(tmp_path: FilePath) -> FilePath:
    file = fresh(tmp_path)
    state = SharedState.open(file)
    for i in range(30):
        state.commit({f"k{i}": "v" * 50}, state.token, "ann")
    state.close()
    return file


def test_foreign_files_are_refused_untouched(tmp_path: FilePath) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just some notes" * 10)
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    conn.close()
    newer = make_file(tmp_path)
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version=99")
    conn.close()
    for file, words in [(text, "not a crdt-state"), (foreign, "foreign"), (newer, "newer")]:
        before = digest(file)
        with pytest.raises(StorageError) as info:
            SharedState.open(file)
        assert words in str(info.value)
        assert info.value.code == "storage" and isinstance(info.value, OSError)
        assert digest(file) == before


def test_damaged_files_are_refused_untouched(tmp_path: FilePath) -> None:
    torn = make_file(tmp_path)
    data = bytearray(torn.read_bytes())
    data[4096:8192] = b"\xa5" * 4096  # a b-tree page full of garbage
    torn.write_bytes(bytes(data))
    bad_blob = make_file(tmp_path)
    with sqlite3.connect(bad_blob) as conn:
        conn.execute("UPDATE snapshot SET doc = x'ffffffff00'")
    conn.close()
    gap = make_file(tmp_path)
    with sqlite3.connect(gap) as conn:
        conn.execute("DELETE FROM log WHERE seq = 10")
    conn.close()
    no_snapshot = make_file(tmp_path)
    with sqlite3.connect(no_snapshot) as conn:
        conn.execute("DELETE FROM snapshot")
    conn.close()
    bad_update = make_file(tmp_path)
    with sqlite3.connect(bad_update) as conn:
        conn.execute("UPDATE snapshot SET doc = ?", (zlib.compress(b"\x05\xff\xff\x01"),))
    conn.close()
    for file in (torn, bad_blob, gap, no_snapshot, bad_update):
        before = digest(file)
        with pytest.raises(StorageError, match="damaged"):
            SharedState.open(file)
        assert digest(file) == before


def test_a_second_opening_in_this_process_is_refused(tmp_path: FilePath) -> None:
    file = fresh(tmp_path)
    state = SharedState.open(file)
    state.commit({"a": 1}, state.token, "ann")
    with pytest.raises(StorageError, match="already open in this process"):
        SharedState.open(file)
    state.commit({"b": 2}, state.token, "ann")  # the owner is unaffected
    state.close()
    again = SharedState.open(file)
    assert again.snapshot() == {"a": 1, "b": 2}
    again.close()


def test_a_second_process_is_refused_while_the_file_is_open(tmp_path: FilePath) -> None:
    file = fresh(tmp_path)
    state = SharedState.open(file)
    state.commit({"a": 1}, state.token, "ann")
    script = textwrap.dedent(
        """
        import sys
        from crdt_state import SharedState, StorageError
        try:
            SharedState.open(sys.argv[1])
        except StorageError as exc:
            print(exc.code, exc.message)
            sys.exit(3)
        print("opened")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def other() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, str(file)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    refused = other()
    assert refused.returncode == 3, refused.stderr
    assert refused.stdout.startswith("storage the state file is open in another process")
    state.close()
    allowed = other()
    assert allowed.returncode == 0 and allowed.stdout.strip() == "opened", allowed.stderr


# -- compaction and size ----------------------------------------------------------
def file_size(file: FilePath) -> int:
    wal = file.with_name(file.name + "-wal")
    return file.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def test_compaction_bounds_the_store_and_loses_nothing(stores: Any) -> None:
    place = stores.fresh()
    state = place.open(keep_history=200, durability="off")
    expected: dict[str, Any] = {}
    for i in range(5_000):
        key = f"k{i % 20}"
        if i % 97 == 0:
            state.commit({key: MISSING}, state.token, f"agent{i % 7}")
            expected.pop(key, None)
        else:
            state.commit({key: {"n": i, "text": "x" * 20}}, state.token, f"agent{i % 7}")
            expected[key] = {"n": i, "text": "x" * 20}
        if i in (2_499, 4_999):
            state._reader().flush()
            assert len(state.history()) <= 200 + 64  # compacted while running
    assert state.snapshot() == expected
    assert len(state.history()) >= 200
    token = state.token
    state.close()
    assert 200 <= stores.rows(place, "log") <= 200 + 64
    assert stores.rows(place, "snapshot") == 1
    again = place.open()
    assert again.snapshot() == expected and again.token == token
    again.close()


def test_compaction_bounds_the_file_size(tmp_path: FilePath) -> None:
    file = fresh(tmp_path)
    state = SharedState.open(file, keep_history=200, durability="off")
    sizes = []
    for i in range(5_000):
        state.commit({f"k{i % 20}": {"n": i, "text": "x" * 20}}, state.token, f"agent{i % 7}")
        if i in (2_499, 4_999):
            state._reader().flush()
            sizes.append(file_size(file))
    state.close()
    with sqlite3.connect(file) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    assert file.stat().st_size < 200_000
    # mid-run the WAL adds at most its checkpoint threshold / size limit (1 MiB each):
    # the file plus WAL stays under a fixed bound, whatever the number of merges
    assert all(size < 200_000 + 2 * 2**20 for size in sizes), sizes


def test_compaction_keeps_deleted_everything_state_distinct_from_data_loss(
    stores: Any,
) -> None:
    place = stores.fresh()
    state = place.open(keep_history=3, durability="off")
    for i in range(100):
        state.commit({"a": i}, state.token, "ann")
    state.commit({"a": MISSING}, state.token, "ann")  # a legitimately empty state
    for i in range(100):
        state.commit({"b": i}, state.token, "ann")
    token = state.token
    state.close()
    again = place.open()
    assert again.snapshot() == {"b": 99} and again.token == token
    again.close()


# -- options and lifecycle ----------------------------------------------------------
def test_options_client_ids_and_closing(stores: Any) -> None:
    place = stores.fresh()
    with pytest.raises(ValueError):
        place.open(durability="sometimes")
    state = place.open(client_id=4242, history=100)
    state.commit({"a": 1}, state.token, "ann")
    assert state.client_id == 4242
    state.close()
    state.close()  # idempotent
    with pytest.raises(StorageError):
        state.commit({"a": 2}, state.token, "ann")  # closed: not stored
    with pytest.raises(StorageError, match="closed"):
        state.history()
    with pytest.raises(StorageError, match="client id"):
        place.open(client_id=4242)  # its clocks are in the file
    with place.open() as again:
        assert again.client_id != 4242  # a fresh id: never reuse one whose clocks went elsewhere
        assert again.snapshot() == {"a": 1}
        again.commit({"b": 2}, again.token, "bob")
    with place.open() as third:
        assert third.snapshot() == {"a": 1, "b": 2}


def test_in_memory_states_have_no_history() -> None:
    state = SharedState()
    with pytest.raises(TypeError):
        state.history()
    state.close()  # a no-op


def test_schema_defaults_are_stored_once_and_not_rewritten_on_reopening(
    stores: Any,
) -> None:
    from pydantic import BaseModel

    class Account(BaseModel):
        tier: str = "free"
        calls: int = 0

    place = stores.fresh()
    state = place.open(schema=Account)
    blame = state.blame("tier")
    assert blame is not None and blame.agent == "schema"
    state.commit({"calls": 3}, state.token, "ann")
    token = state.token
    state.close()
    again = place.open(schema=Account)
    assert again.token == token  # no second write of the defaults
    assert again.model() == Account(tier="free", calls=3)
    assert [h.agent for h in again.history()] == ["ann"]
    again.close()
