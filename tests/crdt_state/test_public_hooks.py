"""The public hooks other layers use instead of the state's private members."""

from __future__ import annotations

import threading

import pytest
from pydantic import BaseModel

from crdt_state import MISSING, Change, SchemaError, SharedState, StaleBase, WrongType


def test_position_and_read_at_read_the_past() -> None:
    state = SharedState()
    start = state.position
    state.commit({"n": 1}, state.token, "a")
    middle = state.position
    state.commit({"n": 2, "m": {"x": 1}}, state.token, "a")
    assert (start, middle, state.position) == (0, 1, 2)
    assert state.read_at("n", middle) == 1
    assert state.read_at("m.x", middle) is MISSING
    assert state.read_at(("m",), state.position) == {"x": 1}
    copy = state.read_at("m", state.position)
    copy["x"] = 99  # a copy: the state is not changed
    assert state.get("m.x") == 1


def test_read_at_an_old_position_is_stale() -> None:
    state = SharedState(history=2)
    for i in range(5):
        state.commit({"n": i}, state.token, "a")
    with pytest.raises(StaleBase):
        state.read_at("n", 0)


def test_prepare_validates_without_touching_the_state() -> None:
    state = SharedState()
    ops = state.prepare({"a.b": 1, "gone": MISSING})
    assert ops == [Change("set", ("a", "b"), 1), Change("delete", ("gone",))]
    with pytest.raises(WrongType):
        state.prepare([Change("append", ("log",), "not a list")])
    with pytest.raises(TypeError):
        state.prepare([("set", "a", 1)])  # type: ignore[list-item]
    assert state.snapshot() == {} and state.position == 0


def test_the_lock_is_the_states_reentrant_lock() -> None:
    state = SharedState()
    with state.lock, state.lock:  # re-entrant, and merges take it too
        state.commit({"n": 1}, state.token, "a")
    done = threading.Event()

    def merge() -> None:
        state.commit({"m": 1}, state.token, "b")
        done.set()

    with state.lock:
        thread = threading.Thread(target=merge)
        thread.start()
        assert not done.wait(0.1)  # the merge waits for the lock
    thread.join(5)
    assert done.is_set() and state.get("m") == 1


class Ticket(BaseModel):
    title: str = ""
    n: int = 0


def test_to_model_validates_a_snapshot() -> None:
    state = SharedState(schema=Ticket)
    assert state.to_model({"title": "t", "n": 2}) == Ticket(title="t", n=2)
    with pytest.raises(SchemaError):
        state.to_model({"n": "not a number"})
    with pytest.raises(TypeError):
        SharedState().to_model({})


def test_a_follower_takes_updates_as_they_are_and_never_writes() -> None:
    authority = SharedState()
    authority.commit({"n": 1, "gone": 1}, authority.token, "a")
    follower = SharedState(follower=True)
    leader = SharedState()
    for replica in (follower, leader):
        replica.apply_update(authority.get_update())
    deleting = authority.fork("a")
    deleting.delete("gone")
    before = authority.token
    deleting.merge()
    update = authority.get_update(before)
    leader.apply_update(update)
    follower.apply_update(update)
    assert follower.token == authority.token  # no tick of its own
    assert follower.snapshot() == leader.snapshot() == {"n": 1}
