"""Values: what can be stored, refused before pycrdt sees it, ints stay ints."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt_state import MISSING, SharedState, UnsupportedValue, VersionVector
from crdt_state.values import normalize, same

INT64 = st.integers(-(2**63), 2**63 - 1)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        INT64,
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


class Thing:
    pass


BAD_VALUES: list[tuple[Any, tuple[str, ...] | None]] = [
    ({1, 2}, None),
    (frozenset(), None),
    (Thing(), None),
    (object(), None),
    (b"bytes", None),
    (Decimal("1.5"), None),
    (1 + 2j, None),
    (2**63, None),
    (-(2**63) - 1, None),
    (10**30, None),
    (float("nan"), None),
    (float("inf"), None),
    (-math.inf, None),
    ({1: "x"}, None),
    ({("a",): 1}, None),
    ({"ok": {"deep": {2: 3}}}, ("ok", "deep")),
    ({"ok": [1, {"x": {1, 2}}]}, ("ok", "x")),
    ([1, 2, 2**64], None),
    ({"n": float("nan")}, ("n",)),
]


def test_int_64_max_is_refused_or_exact() -> None:
    """2**63 - 1 has no exact double: it must be refused or come back unchanged."""
    state = SharedState()
    try:
        state.commit({"n": 2**63 - 1}, state.token, "w")
    except UnsupportedValue:
        assert state.snapshot() == {}
        return
    replica = SharedState()
    replica.apply_update(state.get_update())
    assert state.get("n") == replica.get("n") == 2**63 - 1
    assert type(replica.get("n")) is int


@pytest.mark.parametrize(("value", "where"), BAD_VALUES)
def test_normalize_refuses(value: Any, where: tuple[str, ...] | None) -> None:
    with pytest.raises(UnsupportedValue) as info:
        normalize(value)
    error = info.value
    assert error.code == "unsupported_value"
    assert isinstance(error, TypeError)
    if where is not None:
        assert error.path == where


@pytest.mark.parametrize(("value", "_"), BAD_VALUES)
def test_state_and_branch_refuse_without_panic(value: Any, _: object) -> None:
    """Refused by set/append/commit with a typed error; state and branch unchanged."""
    state = SharedState()
    state.commit({"keep": 1, "list": [1]}, state.token, "init")
    snap, token = state.read()
    branch = state.fork("agent")
    branch.set("mine", "ok")
    calls: list[Callable[[], object]] = [
        lambda: branch.set("k", value),
        lambda: branch.set("deep.x", value),
        lambda: branch.append("list", value),
        lambda: branch.update({"k": value}),
        lambda: state.commit({"k": value}, token, "agent"),
        lambda: state.commit({"k": 1, "j": value}, token, "agent"),
    ]
    for call in calls:
        try:
            call()
        except UnsupportedValue:
            pass
        except BaseException as exc:  # a PanicException is a BaseException
            pytest.fail(f"{type(exc).__name__} leaked: {exc}")
        else:
            pytest.fail("value accepted")
    assert state.read() == (snap, token)
    assert branch.snapshot() == {"keep": 1, "list": [1], "mine": "ok"}
    assert branch.changes() == (("mine",),)
    assert branch.merge().applied == (("mine",),)


def test_resolver_returning_bad_value_is_refused() -> None:
    state = SharedState(resolvers={"x": lambda c: {1, 2}})
    state.commit({"x": 0}, state.token, "init")
    branch = state.fork("b")
    branch.set("x", 1)
    state.commit({"x": 2}, state.token, "rival")
    snap, token = state.read()
    with pytest.raises(UnsupportedValue):
        branch.merge()
    assert state.read() == (snap, token)
    assert branch.status == "open" and branch.get("x") == 1


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_round_trip_through_state(value: Any) -> None:
    """What is written is read back, ints as ints, integral floats as ints (like Yjs).

    A value is either refused up front with UnsupportedValue, or read back
    exactly, locally and on a replica: never silently changed.
    """
    state = SharedState()
    try:
        expected = normalize(value)
    except UnsupportedValue:
        with pytest.raises(UnsupportedValue):
            state.commit({"v": value}, state.token, "w")
        assert state.snapshot() == {}
        return
    state.commit({"v": value}, state.token, "w")
    assert same(state.get("v"), expected)
    # a replica decoding the Yjs update sees the same plain data
    replica = SharedState()
    replica.apply_update(state.get_update())
    assert same(replica.get("v"), expected)
    assert replica.token == state.token


@pytest.mark.parametrize(
    "value",
    [0, 1, -1, 2**31, 2**53 - 1, 2**53, 2**53 + 1, 2**62, 2**63 - 2, -(2**63), -(2**63) + 1, 7],
)
def test_ints_come_back_ints(value: int) -> None:
    state = SharedState()
    branch = state.fork("w")
    branch.set("n", value)
    branch.set("nested.list", [value, {"x": value}])
    branch.merge()
    for got in (state.get("n"), state.get("nested.list")[0], state.get("nested.list")[1]["x"]):
        assert type(got) is int and got == value
    replica = SharedState()
    replica.apply_update(state.get_update())
    got = replica.get("n")
    assert type(got) is int and got == value


def test_normalize_canonical_forms() -> None:
    assert normalize((1, 2, (3,))) == [1, 2, [3]]
    assert type(normalize(2.0)) is int
    assert type(normalize(2.5)) is float
    assert type(normalize(float(2**53))) is int  # integral doubles read back as ints
    assert type(normalize(1e300)) is float  # beyond 64 bits: stays a float
    assert normalize(True) is True
    assert normalize(OrderedDict(a=1)) == {"a": 1}
    original = {"a": [1, {"b": 2}]}
    copy = normalize(original)
    copy["a"][1]["b"] = 3
    assert original == {"a": [1, {"b": 2}]}  # a fresh deep copy


def test_same_is_strict() -> None:
    assert not same(True, 1) and not same(1, True) and not same(0, False)
    assert same(1, 1.0)
    assert not same("1", 1)
    assert same({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})
    assert not same({"a": 1}, {"a": 1, "b": 2})
    assert not same([1], [1, 2])
    assert same(MISSING, MISSING) and not same(MISSING, None)
    assert not same(None, MISSING)


def test_bools_are_not_ints_in_conflicts() -> None:
    state = SharedState()
    state.commit({"flag": 0}, state.token, "init")
    branch = state.fork("b")
    branch.set("flag", False)
    state.commit({"flag": 1}, state.token, "rival")
    with pytest.raises(Exception) as info:
        branch.merge()
    assert getattr(info.value, "code", None) == "conflict"
    assert state.get("flag") == 1 and type(state.get("flag")) is int
    assert isinstance(state.token, VersionVector)
