"""Idempotency keys scoped by writer, and chains of merges that build on each other."""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crdt_state import BrokenChain, Change, ConflictError, SharedState, VersionVector, resolvers
from crdt_state._sqlite_file import FORMAT_VERSION
from crdt_state.requests import LISTED_BROKEN, RequestKey, RequestMemory


def test_memory_is_bounded_and_keeps_the_newest() -> None:
    memory = RequestMemory(keep=2)
    for rid in (1, 2, 3):
        memory.remember(RequestKey("w", rid), VersionVector({1: rid}), (("k",),))
    assert RequestKey("w", 1) not in memory and RequestKey("w", 3) in memory
    assert len(memory) == 2
    result = memory.result(RequestKey("w", 3))
    assert result is not None
    assert result.token == VersionVector({1: 3}) and result.applied == (("k",),)
    assert memory.result(None) is None and memory.result(RequestKey("other", 3)) is None


def test_refused_requests_are_not_remembered() -> None:
    state = SharedState()
    base = state.token
    state.commit({"a": 1}, base, "x")
    with pytest.raises(ConflictError):
        state.commit({"a": 2}, base, "y", request_id=5)
    assert RequestKey("y", 5) not in state._core.requests
    # settled and sent again with the same id: applied now
    state.commit({"a": 2}, base, "y", request_id=5, resolvers={"a": 2})
    assert state.get("a") == 2 and RequestKey("y", 5) in state._core.requests


def test_the_same_request_id_of_two_writers_is_two_requests() -> None:
    state = SharedState()
    base = state.token
    first = state.commit({"alice": 1}, base, "a", request_id=1, writer="w-a")
    second = state.commit({"bob": 2}, base, "b", request_id=1, writer="w-b")
    assert second.applied == (("bob",),) and second.token != first.token
    assert state.snapshot() == {"alice": 1, "bob": 2}
    again = state.commit({"bob": 3}, base, "b", request_id=1, writer="w-b")
    assert again.token == second.token and state.get("bob") == 2  # deduplicated


def test_writer_defaults_to_the_agent() -> None:
    state = SharedState()
    state.commit({"n": 1}, state.token, "a", request_id=9)
    state.commit({"m": 1}, state.token, "b", request_id=9)  # another agent: applied
    state.commit({"n": 5}, state.token, "a", request_id=9, writer="a")  # same key: not
    assert state.snapshot() == {"n": 1, "m": 1}


def test_a_chain_does_not_conflict_with_itself() -> None:
    state = SharedState()
    base = state.token
    state.commit({"n": 0, "status": "new"}, base, "setup")
    base = state.token
    state.commit({"n": 1, "status": "triaged"}, base, "a", request_id=1, writer="w")
    state.commit({"n": 2}, base, "a", request_id=2, writer="w", builds_on=[1])
    state.commit({"status": "resolved"}, base, "a", request_id=3, writer="w", builds_on=[1])
    assert state.snapshot() == {"n": 2, "status": "resolved"}
    # without the chain the same merge is a conflict with the agent's own write
    with pytest.raises(ConflictError):
        state.commit({"n": 3}, base, "a", request_id=4, writer="w")


def test_a_chain_still_conflicts_with_other_writers() -> None:
    state = SharedState()
    state.commit({"n": 0}, state.token, "setup")
    base = state.token
    state.commit({"n": 1}, base, "a", request_id=1, writer="w")
    state.commit({"n": 10}, state.token, "b")  # another writer, after the chain's first merge
    with pytest.raises(ConflictError) as info:
        state.commit({"n": 2}, base, "a", request_id=2, writer="w", builds_on=[1])
    (conflict,) = info.value.conflicts
    assert (conflict.base, conflict.current, conflict.incoming) == (1, 10, 2)
    result = state.commit(
        {"n": 2}, base, "a", request_id=2, writer="w", builds_on=[1],
        resolvers={"n": resolvers.counter},
    )  # fmt: skip
    assert result.conflicts[0].resolution == 11 and state.get("n") == 11


def test_a_chain_has_seen_what_its_links_overwrote() -> None:
    """A link settled after a refusal was judged against a newer base than the merge
    built on it: what the link overwrote is part of what the agent saw (the double
    count the no-lost-update machine found: n == 5 for 3 increments)."""
    state = SharedState()
    state.commit({"n": 0, "tags": {}}, state.token, "setup")
    base = state.token
    state.commit({"n": 1, "tags": {"x": 1}}, base, "other")  # concurrent with the agent
    with pytest.raises(ConflictError):
        state.commit({"n": 1}, base, "a", request_id=1, writer="w")
    # the agent settled its refused increment against the newer state and sent it again
    state.commit({"n": 2}, state.token, "a", request_id=2, writer="w")
    # its next increment, computed on top of that (n == 2 in its view), from the old base
    result = state.commit(
        {"n": 3}, base, "a", request_id=3, writer="w", builds_on=[2],
        resolvers={"n": resolvers.counter},
    )  # fmt: skip
    assert result.conflicts == () and state.get("n") == 3
    # a path the links never wrote still conflicts with the other writer
    with pytest.raises(ConflictError) as info:
        state.commit({"tags": {"y": 1}}, base, "a", request_id=4, writer="w", builds_on=[2, 3])
    assert [c.path for c in info.value.conflicts] == [("tags",)]


def test_a_conflict_on_a_chain_is_judged_from_what_the_agent_saw() -> None:
    state = SharedState()
    state.commit({"n": 0}, state.token, "setup")
    base = state.token
    state.commit({"n": 2}, base, "a", request_id=1, writer="w")  # agent: 0 -> 2
    state.commit({"n": 3}, state.token, "other")  # another writer: +1
    result = state.commit(
        {"n": 3}, base, "a", request_id=2, writer="w", builds_on=[1],
        resolvers={"n": resolvers.counter},
    )  # agent: 2 -> 3  # fmt: skip
    (conflict,) = result.conflicts
    assert (conflict.base, conflict.current, conflict.incoming) == (2, 3, 3)
    assert state.get("n") == 4


@pytest.mark.parametrize("why", ["unknown", "other_writer", "conflicted"])
def test_a_broken_chain_is_refused(why: str) -> None:
    state = SharedState(resolvers={"n": resolvers.last_writer_wins})
    state.commit({"n": 0}, state.token, "setup")
    base = state.token
    if why == "other_writer":
        state.commit({"n": 1}, base, "a", request_id=1, writer="someone-else")
    elif why == "conflicted":
        state.commit({"n": 7}, base, "b")
        state.commit({"n": 1}, base, "a", request_id=1, writer="w")  # applied, with a conflict
    with pytest.raises(BrokenChain) as info:
        state.commit({"n": 2}, base, "a", request_id=2, writer="w", builds_on=[1])
    assert info.value.code == "broken_chain"
    assert info.value.details == {"writer": "w", "request_ids": [1]}
    assert RequestKey("w", 2) not in state._core.requests


def test_a_long_broken_chain_lists_the_lowest_ids_and_counts_the_rest() -> None:
    """A chain of 100,000 unknown ids (a few bytes on the wire) is refused with a bounded
    error: the lowest ids listed, the rest counted, nothing applied."""
    state = SharedState()
    base = state.token
    chain = range(1, 100_001)
    with pytest.raises(BrokenChain) as info:
        state.commit({"n": 1}, base, "a", request_id=200_000, writer="w", builds_on=chain)
    assert info.value.details == {
        "writer": "w",
        "request_ids": list(range(1, LISTED_BROKEN + 1)),
        "unlisted": 100_000 - LISTED_BROKEN,
    }
    assert "100000 earlier merge(s)" in str(info.value)
    assert state.read()[0] == {}


def test_a_request_that_wrote_nothing_is_remembered_and_can_be_built_on() -> None:
    state = SharedState()
    base = state.token
    nothing = state.commit([Change("delete", ("gone",))], base, "a", request_id=1, writer="w")
    assert nothing.applied == ()
    state.commit({"x": 1}, base, "a", request_id=2, writer="w", builds_on=[1])
    assert state.get("x") == 1


def test_keys_and_chains_survive_reopening(tmp_path: Path) -> None:
    file = tmp_path / "state.db"
    state = SharedState.open(file)
    state.commit({"n": 0}, state.token, "setup")
    base = state.token
    state.commit({"n": 1}, base, "a", request_id=1, writer="w")
    state.commit([Change("delete", ("gone",))], base, "a", request_id=2, writer="w")
    state.close()
    reopened = SharedState.open(file)
    repeat = reopened.commit({"n": 99}, base, "a", request_id=1, writer="w")
    assert repeat.applied == (("n",),) and reopened.get("n") == 1
    # the restored log still knows which request made which change
    reopened.commit({"n": 2}, base, "a", request_id=3, writer="w", builds_on=[1, 2])
    assert reopened.get("n") == 2
    reopened.close()


def test_a_format_1_file_is_migrated(tmp_path: Path) -> None:
    file = tmp_path / "old.db"
    state = SharedState.open(file)
    state.commit({"n": 1}, state.token, "agent-a", request_id=42)
    state.close()
    # rewrite the requests table as format 1 kept it
    with closing(sqlite3.connect(file)) as conn, conn:
        conn.execute(
            "CREATE TABLE requests (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL,"
            " token BLOB NOT NULL, paths TEXT NOT NULL)"
        )
        conn.execute("INSERT INTO requests SELECT id, seq, token, paths FROM writer_requests")
        conn.execute("DROP TABLE writer_requests")
        conn.execute("PRAGMA user_version=1")
    reopened = SharedState.open(file)
    again = reopened.commit({"n": 2}, reopened.token, "agent-a", request_id=42)
    assert again.applied == (("n",),) and reopened.get("n") == 1  # still deduplicated
    reopened.close()
    with closing(sqlite3.connect(file)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "requests" not in tables and "writer_requests" in tables
        rows = conn.execute("SELECT writer, id FROM writer_requests").fetchall()
        assert rows == [("agent-a", 42)]


def test_a_repeated_request_is_answered_once_the_original_is_durable(tmp_path: Path) -> None:
    state = SharedState.open(tmp_path / "state.db", durability="full")
    base = state.token
    store = state.store
    assert store is not None
    state.commit({"n": 1}, base, "a", request_id=1, writer="w")
    waited: list[int] = []
    wait = store.wait

    def recording_wait(ticket: int) -> None:
        waited.append(ticket)
        wait(ticket)

    store.wait = recording_wait  # type: ignore[method-assign]
    state.commit({"n": 1}, base, "a", request_id=1, writer="w")  # deduplicated
    assert waited == [store.last_ticket()] and waited[0] >= 1
    state.close()


@given(
    remembered=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 12), st.booleans()), max_size=60
    ),
    keep=st.integers(1, 10),
    chain=st.sets(st.integers(0, 12)),
)
def test_a_chain_passes_exactly_when_every_id_is_remembered_clean(
    remembered: list[tuple[str, int, bool]], keep: int, chain: set[int]
) -> None:
    """Against a plain model of the memory (the newest ``keep`` keys, each with its last
    clean flag): whatever was remembered, overwritten or forgotten, a chain of writer
    ``a`` passes iff each of its ids is remembered clean, and its keys then find the
    remembered requests; otherwise the broken ids are named."""
    memory = RequestMemory(keep=keep)
    model: OrderedDict[tuple[str, int], bool] = OrderedDict()
    token = VersionVector({})
    for writer, rid, clean in remembered:
        memory.remember(RequestKey(writer, rid), token, (), clean)
        model[(writer, rid)] = clean
        model.move_to_end((writer, rid))
        if len(model) > keep:
            model.popitem(last=False)
    broken = sorted(rid for rid in chain if not model.get(("a", rid), False))
    if broken:
        with pytest.raises(BrokenChain) as info:
            memory.chain_keys("a", sorted(chain))
        assert info.value.details["request_ids"] == broken[:LISTED_BROKEN]
    else:
        keys = memory.chain_keys("a", sorted(chain))
        assert keys == {RequestKey("a", rid) for rid in chain}
        assert set(memory.tokens_of(keys)) == keys
    assert all(memory.is_clean(RequestKey(*key)) == clean for key, clean in model.items())
