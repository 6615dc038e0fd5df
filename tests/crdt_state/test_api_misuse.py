"""API misuse gets typed errors (a CrdtStateError with a stable code) naming the path."""

from __future__ import annotations

from typing import Any

import pytest

from crdt_state import CrdtStateError, SharedState, WrongType, resolvers


@pytest.mark.parametrize("name", ["maximum", "union", "last_writer_wins", "retry"])
def test_a_string_naming_a_builtin_policy_is_refused_with_a_hint(name: str) -> None:
    state = SharedState()
    with pytest.raises(WrongType) as info:
        state.commit({"p": 1}, state.token, "ann", resolvers={"p": name})
    assert info.value.code == "wrong_type" and info.value.path == ("p",)
    assert f"resolvers.{name}" in str(info.value)
    assert f"resolvers.constant('{name}')" in str(info.value)
    assert info.value.details["hint"] == f"resolvers.{name}"
    with pytest.raises(WrongType):
        SharedState(resolvers={"tags.*": name})
    with pytest.raises(WrongType):
        SharedState(default=name)
    assert state.snapshot() == {}


def test_the_literal_string_still_works_through_constant() -> None:
    state = SharedState()
    base = state.token
    state.commit({"p": "a"}, base, "ann")
    result = state.commit({"p": "b"}, base, "bob", resolvers={"p": resolvers.constant("maximum")})
    assert state.snapshot() == {"p": "maximum"} and result.conflicts
    state.commit({"q": 1}, state.token, "ann", resolvers={"q": "other words"})  # a constant


@pytest.mark.parametrize(
    ("changes", "base", "agent", "argument"),
    [
        ({"a.b": 1}, None, "ann", "base"),
        ({"a.b": 1}, "token", "ann", "base"),
        ({"a.b": 1}, "ok", 5, "agent"),
        ({"a.b": 1}, "ok", "", "agent"),
        (5, "ok", "ann", "changes"),
        ("a=1", "ok", "ann", "changes"),
    ],
)
def test_commit_arguments_of_the_wrong_type(
    changes: Any, base: Any, agent: Any, argument: str
) -> None:
    state = SharedState()
    state.commit({"x": 1}, state.token, "ann")
    with pytest.raises(WrongType) as info:
        state.commit(changes, state.token if base == "ok" else base, agent)
    assert isinstance(info.value, CrdtStateError) and isinstance(info.value, TypeError)
    assert info.value.code == "wrong_type"
    assert info.value.details["argument"] == argument
    if isinstance(changes, dict):
        assert info.value.path == ("a.b",)
    assert state.snapshot() == {"x": 1}  # nothing applied


@pytest.mark.parametrize("items", [5, None, "abc", {"k": 1}])
def test_extend_with_a_non_iterable_names_the_path(items: Any) -> None:
    state = SharedState()
    branch = state.fork("ann")
    with pytest.raises(WrongType) as info:
        branch.extend("notes.list", items)
    assert info.value.path == ("notes", "list") and info.value.code == "wrong_type"
    assert "append" in str(info.value)
    branch.extend("notes.list", [1, 2])
    branch.merge()
    assert state.snapshot() == {"notes": {"list": [1, 2]}}


def test_fork_and_merge_arguments_of_the_wrong_type() -> None:
    state = SharedState()
    with pytest.raises(WrongType):
        state.fork(5)  # type: ignore[arg-type]
    branch = state.fork("ann")
    branch.set("a", 1)
    with pytest.raises(WrongType) as info:
        branch.merge(resolvers=5)  # type: ignore[arg-type]
    assert info.value.details["resolvers"] == "5"
    branch.merge()
    assert state.snapshot() == {"a": 1}
