"""A merge is all or nothing.

Every write path validates the whole change set first, including the nesting
depth (``MAX_DEPTH``), and refuses with ``UnsupportedValue`` before the
document is touched. A failure injected half-way through writing into the
pycrdt document is rolled back: document, mirror, log, file and replicas keep
agreeing, and a durable file reopens with every acknowledged merge.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import Any

import pytest
from pydantic import BaseModel

from crdt_state import (
    MAX_DEPTH,
    MISSING,
    Branch,
    Change,
    ConflictError,
    SharedState,
    StateUpdate,
    UnsupportedValue,
    WriteFailed,
    resolvers,
)
from crdt_state import _document as ydoc
from crdt_state._document import doc_snapshot
from crdt_state.values import depth_of, nesting


def nested(levels: int, leaf: Any = 1) -> Any:
    """A value with ``levels`` nested dicts (depth ``levels`` below its path)."""
    value = leaf
    for _ in range(levels):
        value = {"k": value}
    return value


def agree(state: SharedState) -> None:
    """Document, mirror and log agree (token = the document's state vector)."""
    assert doc_snapshot(state._core.doc) == state.snapshot()
    assert state.token == state._core.log.head_token
    from crdt_state import VersionVector

    assert state.token == VersionVector.from_state(state._core.doc.get_state())


# -- depth: limit - 1, limit, limit + 1, and 480 ------------------------------------------
@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 480])
def test_every_local_write_path_enforces_the_depth_limit(depth: int) -> None:
    state = SharedState()
    state.commit({"keep": 1}, state.token, "a")
    value = nested(depth - 1)  # stored at a 1-key path: depth `depth`
    assert depth_of(("x",), value) == depth
    before = state.read()
    writes: dict[str, Callable[[Branch], None]] = {
        "set": lambda b: b.set("x", value),
        "update": lambda b: b.update({"x": value}),
        "extend": lambda b: b.extend("x", [nested(depth - 2)]),  # items sit one level down
        "append": lambda b: b.append("x", nested(depth - 2)),
    }
    for name, write in writes.items():
        branch = state.fork("agent")
        if depth <= MAX_DEPTH:
            write(branch)
            branch.merge()
            assert nesting(state.get("x")) == depth - 1, name
            state.commit({"x": MISSING}, state.token, "reset")
            continue
        with pytest.raises(UnsupportedValue) as info:
            write(branch)
        assert info.value.path == ("x",), name
        assert info.value.details == {"depth": depth, "limit": MAX_DEPTH}, name
        assert not branch.dirty  # the branch is unchanged
    if depth > MAX_DEPTH:
        with pytest.raises(UnsupportedValue):
            state.commit({"x": value}, state.token, "c")
        with pytest.raises(UnsupportedValue):
            state.commit([Change("append", ("x",), [nested(depth - 2)])], state.token, "c")
        assert state.read() == before
        agree(state)


def test_path_keys_count_towards_the_depth() -> None:
    state = SharedState()
    ok = tuple(f"k{i}" for i in range(MAX_DEPTH))
    state.commit({ok: 1}, state.token, "a")
    with pytest.raises(UnsupportedValue) as info:
        state.commit({(*ok, "one"): 1}, state.token, "a")
    assert info.value.details["depth"] == MAX_DEPTH + 1
    with pytest.raises(UnsupportedValue):  # 63 keys, then a map holding a map: 65
        state.commit({ok[:-1]: {"x": {}}}, state.token, "a")
    agree(state)


def test_a_resolution_too_deep_is_refused_before_anything_is_written() -> None:
    state = SharedState(resolvers={"n": lambda c: nested(MAX_DEPTH)})
    state.commit({"n": 0, "other": 0}, state.token, "a")
    one, two = state.fork("x"), state.fork("y")
    one.set("n", 1)
    two.set("n", 2)
    two.set("other", 5)
    one.merge()
    before = state.read()
    with pytest.raises(UnsupportedValue):
        two.merge()
    assert state.read() == before
    agree(state)


def test_schema_defaults_too_deep_are_never_written() -> None:
    class Deep(BaseModel):
        ok: dict[str, Any] = {"a": 1}
        deep: dict[str, Any] = nested(MAX_DEPTH + 3)

    state = SharedState(schema=Deep)
    assert state.snapshot() == {"ok": {"a": 1}}
    agree(state)


def test_a_self_referencing_value_is_refused_cleanly() -> None:
    loop: list[Any] = []
    loop.append(loop)
    state = SharedState()
    with pytest.raises(UnsupportedValue) as info:
        state.commit({"x": loop}, state.token, "a")
    assert info.value.details["depth"] > MAX_DEPTH


def test_the_480_case_on_a_durable_state_reopens_with_every_merge(tmp_path: FilePath) -> None:
    """Issue 8, item 4: one ~3 KB merge nesting 480 dicts used to brick the file."""
    file = tmp_path / "deep.db"
    state = SharedState.open(file)
    state.commit({"a": 1}, state.token, "x")
    with pytest.raises(UnsupportedValue) as info:
        state.commit({"deep": nested(480)}, state.token, "x")
    assert info.value.code == "unsupported_value"
    assert info.value.details == {"depth": 481, "limit": MAX_DEPTH}
    with state.fork("y") as branch:
        with pytest.raises(UnsupportedValue):
            branch.set("deep", nested(480))
        branch.set("b", 2)
    state.commit({"c": 3}, state.token, "z")
    snapshot, token = state.read()
    agree(state)
    state.close()
    with SharedState.open(file) as again:
        assert again.read() == (snapshot, token)
        assert snapshot == {"a": 1, "b": 2, "c": 3}
        again.commit({"d": 4}, again.token, "w")
    with SharedState.open(file) as third:
        assert third.get("d") == 4


# -- failures injected half-way through a write --------------------------------------------
class Boom(RuntimeError):
    pass


def fail_on(monkeypatch: pytest.MonkeyPatch, name: str, call: int, error: BaseException) -> None:
    """Make ``document.<name>`` raise ``error`` on its ``call``-th call (only that one)."""
    real = getattr(ydoc, name)
    calls = [0]

    def patched(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == call:
            if isinstance(error, Boom) and name == "doc_set":
                real(*args)  # half-written: the value is in the document, then it fails
            raise error
        return real(*args)

    monkeypatch.setattr(ydoc, name, patched)


INITIAL = {"a": 1, "m": {"x": 1}, "log": [1], "gone": "soon"}
CHANGES = [
    Change("set", ("a",), {"deep": {"er": [1, 2]}}),
    Change("set", ("m", "y"), 2),
    Change("append", ("log",), [2, 3]),
    Change("delete", ("gone",)),
    Change("set", ("new", "path"), "n"),
    Change("set", ("z",), 9),
]


def prepared(state: SharedState) -> SharedState:
    state.commit(dict(INITIAL), state.token, "init")
    return state


@pytest.mark.parametrize(
    ("name", "call"),
    [("doc_set", 1), ("doc_set", 3), ("doc_set", 4), ("doc_extend", 1), ("doc_delete", 1)],
)
def test_a_failure_mid_write_rolls_back_in_memory(
    monkeypatch: pytest.MonkeyPatch, name: str, call: int
) -> None:
    state = prepared(SharedState())
    earlier = state.fork("earlier")  # forked before the failure
    earlier.set("a", 5)
    before = state.snapshot()
    fail_on(monkeypatch, name, call, Boom("injected"))
    with pytest.raises(WriteFailed) as info:
        state.commit(CHANGES, state.token, "agent")
    error = info.value
    assert error.code == "write_failed"
    assert error.details["rolled_back"] is True
    assert "injected" in error.details["cause"]
    assert isinstance(error.__cause__, Boom)
    assert error.path is not None
    monkeypatch.undo()
    assert state.snapshot() == before
    agree(state)
    # the state goes on: later merges work, a branch forked before sees no phantom write
    assert earlier.merge().conflicts == ()
    state.commit(CHANGES, state.token, "agent")
    assert state.get("z") == 9 and state.get("log") == [1, 2, 3] and "gone" not in state
    agree(state)


def test_a_real_pycrdt_panic_mid_write_rolls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    state = prepared(SharedState())
    before = state.snapshot()
    real = ydoc.doc_set
    calls = [0]

    def panicking(target: Any, path: Any, value: Any) -> None:
        calls[0] += 1
        real(target, path, 2**64 if calls[0] == 2 else value)  # pycrdt panics on 2**64

    monkeypatch.setattr(ydoc, "doc_set", panicking)
    with pytest.raises(WriteFailed) as info:
        state.commit(CHANGES, state.token, "agent")
    assert type(info.value.__cause__).__name__ == "PanicException"
    monkeypatch.undo()
    assert state.snapshot() == before
    agree(state)


def test_keyboard_interrupt_mid_write_rolls_back_and_propagates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = prepared(SharedState())
    before = state.snapshot()
    fail_on(monkeypatch, "doc_set", 2, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        state.commit(CHANGES, state.token, "agent")
    monkeypatch.undo()
    assert state.snapshot() == before
    agree(state)


def test_when_the_rollback_fails_too_everything_still_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = prepared(SharedState())
    real = ydoc.doc_set
    calls = [0]

    def broken(*args: Any) -> None:
        calls[0] += 1
        if calls[0] >= 2:
            raise Boom("broken for good")
        real(*args)

    monkeypatch.setattr(ydoc, "doc_set", broken)
    with pytest.raises(WriteFailed) as info:
        state.commit(CHANGES, state.token, "agent")
    assert info.value.details["rolled_back"] is False
    monkeypatch.undo()
    agree(state)  # the mirror was read back from the document


def test_a_failed_write_leaves_a_durable_file_that_reopens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: FilePath
) -> None:
    file = tmp_path / "fail.db"
    state = prepared(SharedState.open(file))
    with monkeypatch.context() as patch:
        fail_on(patch, "doc_set", 3, Boom("injected"))
        with pytest.raises(WriteFailed):
            state.commit(CHANGES, state.token, "agent")
    agree(state)
    state.commit({"after": 1}, state.token, "agent")  # builds on the compensated items
    with monkeypatch.context() as patch:
        fail_on(patch, "doc_extend", 1, Boom("again"))
        with pytest.raises(WriteFailed):
            state.commit([Change("append", ("log",), [7])], state.token, "agent")
    state.commit({"a": 2}, state.token, "agent")
    acknowledged = state.read()
    state.close()
    with SharedState.open(file) as again:
        assert again.read() == acknowledged
        assert again.snapshot() == {**INITIAL, "after": 1, "a": 2}
        agree(again)
        again.commit({"b": 1}, again.token, "x")


def test_a_subscribed_replica_converges_after_a_failed_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = prepared(SharedState())
    replica = SharedState()
    replica.apply_update(state.get_update())
    seen: list[StateUpdate] = []
    state.subscribe(seen.append)
    with monkeypatch.context() as patch:
        fail_on(patch, "doc_set", 3, Boom("injected"))
        with pytest.raises(WriteFailed):
            state.commit(CHANGES, state.token, "agent")
    assert len(seen) == 1 and seen[0].paths == ()  # the compensated transaction, no writes
    state.commit({"after": {"k": 1}}, state.token, "agent")
    for change in seen:
        replica.apply_update(change.update)
    assert replica.snapshot() == state.snapshot() == {**INITIAL, "after": {"k": 1}}
    assert replica.token == state.token
    agree(replica)


def test_a_failed_async_merge_rolls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: FilePath
) -> None:
    state = prepared(SharedState.open(tmp_path / "async.db"))
    before = state.snapshot()

    async def run() -> None:
        branch = state.fork("agent")
        branch.set("a", 10)
        branch.set("b", 11)
        with monkeypatch.context() as patch:
            fail_on(patch, "doc_set", 2, Boom("injected"))
            with pytest.raises(WriteFailed):
                await branch.amerge()
        assert branch.status == "open"  # nothing merged: it may be merged again
        await branch.amerge()

    asyncio.run(run())
    assert state.snapshot() == {**before, "a": 10, "b": 11}
    agree(state)
    state.close()


def test_refused_merges_still_touch_nothing() -> None:
    state = prepared(SharedState())
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 2)
    two.set("a", 3)
    one.merge()
    before = state.read()
    with pytest.raises(ConflictError):
        two.merge(default=resolvers.raise_conflict)
    assert state.read() == before
    agree(state)
