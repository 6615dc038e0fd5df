"""What trying the library as a new user found: each test failed on the code before its fix."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from crdt_state import (
    ConflictError,
    DuplicatePath,
    InvalidPath,
    RequestReused,
    SchemaError,
    SharedState,
    StateUpdate,
    UnsupportedValue,
    WriteInListener,
    WrongType,
    resolvers,
)


# -- a merge is applied once, whatever happens to the wait for the disk ----------------------
async def test_a_cancelled_amerge_called_again_does_not_merge_twice(tmp_path: Path) -> None:
    state = SharedState.open(tmp_path / "n.db", resolvers={"n": resolvers.counter})
    state.commit({"n": 0}, state.token, "setup")
    cancelled = 0
    for _ in range(30):
        branch = state.fork("agent")
        branch.set("n", branch.get("n") + 1)
        task = asyncio.create_task(branch.amerge())
        await asyncio.sleep(0)  # the merge is applied; its wait for the disk has begun
        if task.cancel():
            cancelled += 1
            with pytest.raises(asyncio.CancelledError):
                await task
        assert branch.status == "merged"
        again = await branch.amerge()  # waits for the same change, applies nothing
        assert again is branch.result
    assert cancelled > 0  # the wait was interrupted at least once
    assert state.get("n") == 30
    state.close()
    with SharedState.open(tmp_path / "n.db") as reopened:
        assert reopened.get("n") == 30 and len(reopened.history(agent="agent")) == 30


# -- listeners -----------------------------------------------------------------------------------
def test_a_listener_that_raises_is_logged_and_the_change_is_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = SharedState.open(tmp_path / "l.db")

    def broken(update: StateUpdate) -> None:
        raise ZeroDivisionError("a bug in the listener")

    state.subscribe(broken)
    with caplog.at_level(logging.ERROR, logger="crdt_state.listeners"), state.fork("agent") as b:
        b.set("a", 1)
    branch = b
    assert branch.status == "merged"
    assert any("a listener raised" in r.getMessage() for r in caplog.records)
    state.commit({"b": 2}, state.token, "later")  # the store still takes writes
    state.close()
    with SharedState.open(tmp_path / "l.db") as reopened:
        assert reopened.snapshot() == {"a": 1, "b": 2}


def test_a_listener_that_writes_to_its_state_is_refused_and_breaks_nothing(tmp_path: Path) -> None:
    state = SharedState.open(tmp_path / "w.db")
    refused: list[BaseException] = []

    def echo(update: StateUpdate) -> None:
        try:
            state.commit({"echo": update.seq}, state.token, "listener")
        except Exception as exc:
            refused.append(exc)

    state.subscribe(echo)
    state.commit({"a": 1}, state.token, "agent")
    [error] = refused
    assert isinstance(error, WriteInListener) and error.code == "write_in_listener"
    state.commit({"b": 2}, state.token, "agent")
    assert state.snapshot() == {"a": 1, "b": 2}
    state.close()
    with SharedState.open(tmp_path / "w.db") as reopened:
        assert reopened.snapshot() == {"a": 1, "b": 2}


# -- policies, change sets, history filters --------------------------------------------------
def test_default_none_means_no_default_policy_as_for_merge() -> None:
    state = SharedState(default=None)
    state.commit({"a": 1}, state.token, "setup")
    x, y = state.fork("x"), state.fork("y")
    x.set("a", 2)
    y.set("a", 3)
    x.merge()
    with pytest.raises(ConflictError):
        y.merge()
    assert state.get("a") == 2


@pytest.mark.parametrize(
    "changes", [{"d": 1, "d.e": 2}, {"d.e": 2, "d": 1}, {"a.b.c": 1, "a": {"x": 1}}]
)
def test_a_change_set_writing_a_path_and_one_inside_it_is_refused(changes: dict[str, Any]) -> None:
    state = SharedState()
    with pytest.raises(DuplicatePath) as info:
        state.commit(changes, state.token, "agent")
    assert len(info.value.details["paths"]) == 2
    assert state.snapshot() == {}


def test_history_and_conflicts_take_datetimes_and_text_and_refuse_the_rest(
    tmp_path: Path,
) -> None:
    with SharedState.open(tmp_path / "h.db") as state:
        state.commit({"a": 1}, state.token, "agent")
        before = datetime.now() - timedelta(minutes=10)
        for since in (before, "10m", "1d", before.isoformat(), time.time() - 600, str(0)):
            assert len(state.history(since=since)) == 1, since
        assert state.history(since=datetime.now() + timedelta(minutes=1)) == []
        assert state.history(until="1d") == []
        assert state.conflicts(since="10m") == []
        for bad in ("yesterday", object(), float("nan"), True):
            with pytest.raises(WrongType):
                state.history(since=bad)
        with pytest.raises(WrongType):
            state.history(limit="x")
        with pytest.raises(WrongType):
            state.history(agent=3)


# -- values --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"z": "\ud800"}, UnsupportedValue),
        ({"z": ["ok", "bad \udfff"]}, UnsupportedValue),
        ({"z": {"\udc00": 1}}, UnsupportedValue),
        ({("\ud800",): 1}, InvalidPath),
    ],
)
def test_lone_surrogates_are_refused_before_pycrdt_sees_them(
    changes: dict[Any, Any], error: type[Exception], tmp_path: Path
) -> None:
    with SharedState.open(tmp_path / "s.db") as state:
        with pytest.raises(error):
            state.commit(changes, state.token, "agent")
        assert state.snapshot() == {} and state.history() == []


class Customer(BaseModel):
    name: str = ""
    tier: str = "free"


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")
    a: int = 0


class Ticket(BaseModel):
    customer: Customer = Customer()
    findings: list[Customer] = []
    by_id: dict[str, Customer] = {}
    lenient: Lenient = Lenient()


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("customer", {"name": "a", "zzz": 1}, ("customer", "zzz")),
        ("by_id", {"k": {"name": "a", "bad": 1}}, ("by_id", "k", "bad")),
        ("by_id.k", {"bad": 1}, ("by_id", "k", "bad")),
    ],
)
def test_a_typed_state_refuses_unknown_keys_inside_a_value(
    path: str, value: Any, where: tuple[str, ...]
) -> None:
    state = SharedState(schema=Ticket)
    branch = state.fork("agent")
    with pytest.raises(SchemaError) as info:
        branch.set(path, value)
    [entry] = info.value.errors
    assert entry["type"] == "extra_forbidden" and tuple(entry["loc"]) == where
    with pytest.raises(SchemaError):
        branch.append("findings", {"name": "x", "bogus": 1})
    assert not branch.dirty


def test_a_model_that_asks_to_ignore_extras_still_does() -> None:
    state = SharedState(schema=Ticket)
    with state.fork("agent") as branch:
        branch.set("lenient", {"a": 1, "q": 2})
        branch.set("customer", {"name": "ok"})
    assert state.get("lenient") == {"a": 1}
    assert state.get("customer") == {"name": "ok", "tier": "free"}


# -- branch writes: the covering rule, without the quadratic scan -----------------------------
_keys = st.sampled_from(["a", "b", "c"])
_paths = st.lists(_keys, min_size=1, max_size=3).map(tuple)


def _root_most(writes: list[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """The reference: after each write, the written paths no other covers."""
    kept: list[tuple[str, ...]] = []
    for path in writes:
        if any(path[: len(k)] == k for k in kept):
            continue
        kept = [k for k in kept if k[: len(path)] != path] + [path]
    return set(kept)


@settings(max_examples=300, deadline=None)
@given(st.lists(_paths, max_size=25))
def test_a_branch_keeps_the_root_most_writes(writes: list[tuple[str, ...]]) -> None:
    state = SharedState()
    branch = state.fork("agent")
    taken: list[tuple[str, ...]] = []
    for i, path in enumerate(writes):
        try:
            branch.set(path, i)
        except WrongType:  # below a scalar written before: refused, nothing changed
            continue
        taken.append(path)
    assert set(branch.changed_paths()) == _root_most(taken)


def test_an_agent_name_is_at_most_256_characters() -> None:
    """A 1 MB name per merge (the hub's limit) was stored with every change and fed to
    every inspector: 400 such merges made an 800 MB room file."""
    state = SharedState()
    state.fork("a" * 256).merge()
    for call in (
        lambda: state.fork("a" * 257),
        lambda: state.commit({"x": 1}, state.token, "a" * 257),
        lambda: state.commit([], state.token, "a" * 1_000_000),  # the hub's form
    ):
        with pytest.raises(WrongType) as info:
            call()
        assert "at most 256 characters" in str(info.value)
    assert state.snapshot() == {}


def test_messages_stay_readable_for_huge_paths_and_values_that_contain_themselves() -> None:
    state = SharedState()
    long_path = tuple(f"k{i}" for i in range(10_000))
    with pytest.raises(UnsupportedValue) as deep:
        state.commit({long_path: 1}, state.token, "agent")
    assert len(str(deep.value)) < 500 and "(10000 keys)" in str(deep.value)
    assert deep.value.path == long_path  # the error keeps it whole
    loop: dict[str, Any] = {}
    loop["a"] = loop
    with pytest.raises(UnsupportedValue) as endless:
        state.commit({"x": loop}, state.token, "agent")
    assert "contains itself" in str(endless.value)


# -- a reopened state judges as it did before -----------------------------------------------
_nested = st.lists(st.sampled_from(["own", "w0", "w1", "w2"]), min_size=1, max_size=3).map(tuple)


def _outcome(state: SharedState, path: tuple[str, ...], base: Any) -> str:
    try:
        state.commit({path: 1}, base, "probe")
    except ConflictError:
        return "conflict"
    except WrongType:
        return "wrong_type"
    return "merged"


def _history_of(state: SharedState, writes: list[tuple[str, ...]]) -> list[Any]:
    """Commit each write on the first base (others' writes since are concurrent); the
    tokens after each."""
    bases = [state.token]
    for i, path in enumerate(writes):
        with contextlib.suppress(ConflictError, WrongType):
            state.commit({path: i}, bases[0], f"w{i}")
        bases.append(state.token)
    return bases


@settings(max_examples=60, deadline=None)
@given(writes=st.lists(_nested, min_size=1, max_size=5), probe=_nested, at=st.integers(0, 5))
def test_a_reopened_state_judges_an_old_base_as_one_that_never_closed(
    writes: list[tuple[str, ...]], probe: tuple[str, ...], at: int, tmp_path_factory: Any
) -> None:
    """A merge that created a map showed, replayed from the file, as a write of the whole
    map: a merge on an older base writing another key of it was a false conflict after a
    reopen (found over a hub restart and a cluster failover)."""
    file = tmp_path_factory.mktemp("reopen") / "s.db"
    with SharedState.open(file) as stored:
        bases = _history_of(stored, writes)
    live = SharedState()
    live_bases = _history_of(live, writes)
    pick = min(at, len(bases) - 1)
    expected = _outcome(live, probe, live_bases[pick])
    with SharedState.open(file) as reopened:
        assert _outcome(reopened, probe, bases[pick]) == expected


def test_an_agent_name_with_a_lone_surrogate_is_refused_before_the_store_sees_it(
    tmp_path: Path,
) -> None:
    """It reached the store, which failed for good ("this store takes no more writes")."""
    with SharedState.open(tmp_path / "a.db") as state:
        for call in (
            lambda: state.commit({"z": 1}, state.token, "bad\ud800"),
            lambda: state.fork("\udcff"),
        ):
            with pytest.raises(WrongType):
                call()
        state.commit({"z": 1}, state.token, "agent-é")  # not ASCII, but Unicode text
    with SharedState.open(tmp_path / "a.db") as reopened:
        assert reopened.snapshot() == {"z": 1}


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, asyncio.CancelledError])
def test_a_listener_interrupted_leaves_the_change_stored(
    interrupt: type[BaseException], tmp_path: Path
) -> None:
    """An interrupt from a listener propagates, but the change was stored before it was
    told: the state and its file no longer disagree ("takes no more writes")."""
    state = SharedState.open(tmp_path / "i.db")
    once = [True]

    def interrupted(update: StateUpdate) -> None:
        if once.pop() if once else False:
            raise interrupt

    state.subscribe(interrupted)
    with pytest.raises(interrupt):
        state.commit({"a": 1}, state.token, "agent")
    state.commit({"b": 2}, state.token, "agent")  # the store still takes writes
    state.close()
    with SharedState.open(tmp_path / "i.db") as reopened:
        assert reopened.snapshot() == {"a": 1, "b": 2}


def test_a_request_key_reused_for_other_paths_is_refused_not_taken_for_a_resend(
    tmp_path: Path,
) -> None:
    """Two clients on copies of one local file share a writer id and issue the same
    request ids: the second one's merges were answered as re-sends and lost."""
    with SharedState.open(tmp_path / "r.db") as state:
        first = state.commit({"w.A-0": 0}, state.token, "a", request_id=1, writer="shared")
        again = state.commit({"w.A-0": 0}, state.token, "a", request_id=1, writer="shared")
        assert again.token == first.token and again.applied == first.applied  # a re-send
        with pytest.raises(RequestReused) as info:
            state.commit({"w.B-0": 0}, state.token, "b", request_id=1, writer="shared")
        assert info.value.code == "request_reused"
        assert info.value.details["applied"] == [["w", "A-0"]]
        assert info.value.details["paths"] == [["w", "B-0"]]
        state.commit({"w.B-0": 0}, state.token, "b", request_id=1, writer="other")  # its own
        assert state.get("w") == {"A-0": 0, "B-0": 0}
    reopened = SharedState.open(tmp_path / "r.db")  # remembered across reopening
    with reopened, pytest.raises(RequestReused):
        reopened.commit({"w.C": 1}, reopened.token, "c", request_id=1, writer="shared")
