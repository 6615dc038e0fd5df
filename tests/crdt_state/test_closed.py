"""After ``close()`` a durable state takes no writes: each raises StateClosed, nothing changes.

Issue 8, item 6: a merge after ``close()`` used to raise but stay applied in
memory. Every write path is tried here; memory, token and file must be
exactly as they were at the close. Reads of the content kept in memory still
work; the readers that need the file raise.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import weakref
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import Any

import pytest

from crdt_state import (
    Branch,
    Change,
    SharedState,
    StateClosed,
    StorageError,
    VersionVector,
    resolvers,
)


def digest(file: FilePath) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


@pytest.fixture
def closed(tmp_path: FilePath) -> tuple[SharedState, FilePath, Branch]:
    file = tmp_path / "closed.db"
    state = SharedState.open(file)
    state.commit({"a": 1, "log": [1]}, state.token, "init", request_id=5)
    branch = state.fork("early")  # forked before the close
    branch.set("b", 2)
    state.close()
    return state, file, branch


def _other_update(state: SharedState) -> bytes:
    other = SharedState()
    other.apply_update(state.get_update())
    other.commit({"remote": 1}, other.token, "r")
    return other.get_update(state.token)


RAN: list[str] = []  # agent steps that ran (none may)


def step(branch: Branch) -> None:
    RAN.append(branch.agent)
    branch.set("c", 3)


WRITES: dict[str, Callable[[SharedState, Branch], Any]] = {
    "merge of an earlier branch": lambda s, b: b.merge(),
    "amerge of an earlier branch": lambda s, b: asyncio.run(b.amerge()),
    "fork": lambda s, b: s.fork("late"),
    "commit": lambda s, b: s.commit({"c": 3}, s.token, "x"),
    "commit repeating a request id": lambda s, b: s.commit({"a": 1}, s.token, "x", request_id=5),
    "commit of changes": lambda s, b: s.commit([Change("append", ("log",), [2])], s.token, "x"),
    "acommit": lambda s, b: asyncio.run(s.acommit({"c": 3}, s.token, "x")),
    "apply_update": lambda s, b: s.apply_update(_other_update(s)),
    "aapply_update": lambda s, b: asyncio.run(s.aapply_update(_other_update(s))),
    "transact": lambda s, b: s.transact(step, agent="x"),
    "atransact": lambda s, b: asyncio.run(s.atransact(step, agent="x", default=resolvers.retry)),
    "branch set": lambda s, b: b.set("c", 3),
    "branch update": lambda s, b: b.update({"c": 3}),
    "branch append": lambda s, b: b.append("log", 2),
    "branch delete": lambda s, b: b.delete("a"),
    "history": lambda s, b: s.history(),
    "at": lambda s, b: s.at(s.token),
    "blame": lambda s, b: s.blame("a"),
    "conflicts": lambda s, b: s.conflicts(),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_every_write_path_raises_and_changes_nothing(
    closed: tuple[SharedState, FilePath, Branch], name: str
) -> None:
    state, file, branch = closed
    before = state.read()
    on_disk = digest(file)
    RAN.clear()
    with pytest.raises(StateClosed) as info:
        WRITES[name](state, branch)
    assert info.value.code == "state_closed"
    assert isinstance(info.value, StorageError)  # `except StorageError` keeps working
    assert info.value.details["file"] == str(file)
    assert "closed" in str(info.value)
    assert RAN == []  # transact refuses before running the agent step
    assert state.read() == before  # nothing in memory
    assert digest(file) == on_disk  # nothing on disk
    with SharedState.open(file) as again:  # and the file holds what was acknowledged
        assert again.read() == before


def test_reads_of_the_content_still_work(closed: tuple[SharedState, FilePath, Branch]) -> None:
    state, _, branch = closed
    assert state.snapshot() == {"a": 1, "log": [1]}
    assert state.get("a") == 1 and "log" in state
    _, token = state.read()
    assert token == state.token and isinstance(token, VersionVector)
    assert state.get_update()
    assert branch.get("b") == 2  # a branch still reads its own view
    state.close()  # idempotent


def test_closing_waits_for_a_merge_in_progress(tmp_path: FilePath) -> None:
    """Threads merging while another closes: every merge either lands (and is on disk)
    or raises StateClosed having changed nothing."""
    import threading

    file = tmp_path / "race.db"
    state = SharedState.open(file)
    outcomes: dict[int, str] = {}

    def agent(i: int) -> None:
        try:
            state.commit({f"k{i}": i}, state.token, f"a{i}")
            outcomes[i] = "applied"
        except StateClosed:
            outcomes[i] = "refused"

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(40)]
    for thread in threads[:20]:
        thread.start()
    state.close()
    for thread in threads[20:]:
        thread.start()
    for thread in threads:
        thread.join()
    applied = {f"k{i}": i for i, outcome in outcomes.items() if outcome == "applied"}
    assert state.snapshot() == applied
    assert all(outcomes[i] == "refused" for i in range(20, 40))
    with SharedState.open(file) as again:
        assert again.snapshot() == applied


def test_an_in_memory_state_is_unaffected_by_close() -> None:
    state = SharedState()
    state.close()
    state.commit({"a": 1}, state.token, "x")
    with state.fork("y") as branch:
        branch.set("b", 2)
    assert state.snapshot() == {"a": 1, "b": 2}


def test_a_closed_durable_state_is_freed_without_the_cyclic_collector(
    tmp_path: FilePath,
) -> None:
    """Closing leaves no reference cycle: the store, its SQLite connection and the
    document go as soon as the last reference does (a hub unloading thousands of rooms
    otherwise holds them until a full collection, which a tuned collector rarely runs).
    """
    gc.collect()
    gc.disable()
    try:
        state = SharedState.open(tmp_path / "freed.db")
        state.commit({"a": 1}, state.token, "agent")
        unsubscribe = state.subscribe(lambda change: None)
        unsubscribe()
        store = state._core.store
        assert store is not None
        refs: list[weakref.ref[object]] = [weakref.ref(state), weakref.ref(store)]
        state.close()
        del state, store, unsubscribe
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()
