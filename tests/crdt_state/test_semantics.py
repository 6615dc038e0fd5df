"""The merge-semantics table of DESIGN.md, row by row, plus the branch contract."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crdt_state import (
    MISSING,
    BranchClosed,
    Change,
    ConflictError,
    PathNotFound,
    SharedState,
    UnsupportedValue,
    WrongType,
    resolvers,
)


def make(initial: dict[str, Any] | None = None, **kwargs: Any) -> SharedState:
    state = SharedState(**kwargs)
    if initial:
        with state.fork("init") as b:
            for key, value in initial.items():
                b.set((key,), value)
    return state


# -- row 1: branch wrote p, state did nothing under p -> branch value ----------------
def test_branch_write_untouched_path_applies() -> None:
    state = make({"a": 1, "b": {"c": 2}})
    branch = state.fork("x")
    branch.set("b.c", 3)
    result = branch.merge()
    assert state.snapshot() == {"a": 1, "b": {"c": 3}}
    assert result.applied == (("b", "c"),)
    assert result.conflicts == ()
    assert result.fast_forward


# -- row 2: branch did nothing under p, state wrote p -> state value kept -------------
def test_state_write_kept_when_branch_did_not_touch() -> None:
    state = make({"a": 1, "b": 2})
    branch = state.fork("x")
    other = state.fork("y")
    other.set("a", 10)
    other.merge()
    branch.set("b", 20)
    result = branch.merge()
    assert state.snapshot() == {"a": 10, "b": 20}
    assert not result.fast_forward
    assert result.conflicts == ()


# -- row 3: both wrote p, same value -> conflict (same_value) -> resolver -----------
def test_same_value_is_a_conflict_flagged_same_value() -> None:
    state = make({"a": 1})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 5)
    two.set("a", 5)
    one.merge()
    before = state.read()
    with pytest.raises(ConflictError) as info:
        two.merge()
    (conflict,) = info.value.conflicts
    assert (conflict.base, conflict.current, conflict.incoming) == (1, 5, 5)
    assert conflict.same_value
    assert state.read() == before
    result = two.merge(resolvers={"a": resolvers.accept_equal})
    assert [c.same_value for c in result.conflicts] == [True]
    assert result.applied == ()  # the resolution equals the current value: nothing written
    assert state.read() == before


def test_same_value_is_strict_about_bool_and_int() -> None:
    state = make({"a": 0})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 1)
    two.set("a", True)
    one.merge()
    with pytest.raises(ConflictError) as info:
        two.merge(resolvers={"a": resolvers.accept_equal})
    assert not info.value.conflicts[0].same_value


# -- row 4: both wrote p, different values -> conflict -> resolver / retry / error ---
def test_different_values_conflict_and_default_raises() -> None:
    state = make({"a": 1})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 2)
    two.set("a", 3)
    one.merge()
    before = state.snapshot(), state.token
    with pytest.raises(ConflictError) as info:
        two.merge()
    (conflict,) = info.value.conflicts
    assert conflict.path == ("a",)
    assert (conflict.base, conflict.current, conflict.incoming) == (1, 2, 3)
    assert (conflict.current_agent, conflict.incoming_agent) == ("x", "y")
    assert not conflict.resolved
    assert info.value.code == "conflict"
    # nothing applied, branch still open and intact
    assert (state.snapshot(), state.token) == before
    assert two.status == "open"
    assert two.get("a") == 3


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (resolvers.last_writer_wins, 3),
        (resolvers.first_writer_wins, 2),
        (resolvers.maximum, 3),
        (resolvers.minimum, 2),
        (resolvers.counter, 4),  # 1 + (2 - 1) + (3 - 1)
        (lambda c: c.current * 10 + c.incoming, 23),
    ],
)
def test_policies_resolve_scalar_conflicts(policy: Any, expected: int) -> None:
    state = make({"a": 1}, resolvers={"a": policy})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 2)
    two.set("a", 3)
    one.merge()
    result = two.merge()
    assert state.get("a") == expected
    assert result.conflicts[0].resolution == expected


def test_union_policy_keeps_both_lists() -> None:
    state = make({"tags": ["a"]}, resolvers={"tags": resolvers.union})
    one, two = state.fork("x"), state.fork("y")
    one.set("tags", ["a", "b"])
    two.set("tags", ["c", "a"])
    one.merge()
    two.merge()
    assert state.get("tags") == ["a", "b", "c"]


def test_resolve_with_a_constant_at_merge_time() -> None:
    state = make({"a": 1})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 2)
    two.set("a", 3)
    one.merge()
    with pytest.raises(ConflictError):
        two.merge()
    two.merge(resolvers={"a": 42})
    assert state.get("a") == 42


def test_rebase_after_conflict_lets_the_branch_win() -> None:
    state = make({"a": 1, "b": 1})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", 2)
    one.merge()
    two.set("a", 3)
    with pytest.raises(ConflictError):
        two.merge()
    two.rebase()
    assert two.base == state.token
    result = two.merge()
    assert result.conflicts == ()
    assert state.snapshot() == {"a": 3, "b": 1}


def test_most_specific_pattern_wins() -> None:
    state = make(
        {"m": {"x": 1, "y": 1}},
        resolvers={
            "m.*": resolvers.maximum,
            "m.x": resolvers.minimum,
            "**": resolvers.last_writer_wins,
        },
    )
    one, two = state.fork("a"), state.fork("b")
    one.update({"m.x": 5, "m.y": 5})
    two.update({"m.x": 7, "m.y": 7})
    one.merge()
    two.merge()
    assert state.get("m") == {"x": 5, "y": 7}


def test_policy_that_cannot_handle_values_leaves_conflict_unresolved() -> None:
    state = make({"a": "x"}, resolvers={"a": resolvers.counter})
    one, two = state.fork("x"), state.fork("y")
    one.set("a", "y")
    two.set("a", "z")
    one.merge()
    with pytest.raises(ConflictError):
        two.merge()


# -- row 5: overlapping paths (child / parent) -> conflict ----------------------------
def test_write_to_parent_and_child_conflict() -> None:
    state = make({"c": {"tier": "gold", "name": "n"}})
    parent, child = state.fork("p"), state.fork("c")
    parent.set("c", {"tier": "silver"})
    child.set("c.tier", "bronze")
    parent.merge()
    with pytest.raises(ConflictError) as info:
        child.merge()
    (conflict,) = info.value.conflicts
    assert conflict.path == ("c", "tier")
    assert (conflict.base, conflict.current, conflict.incoming) == ("gold", "silver", "bronze")


def test_write_to_child_then_parent_conflict() -> None:
    state = make({"c": {"tier": "gold"}})
    parent, child = state.fork("p"), state.fork("c")
    child.set("c.tier", "bronze")
    child.merge()
    parent.set("c", {"tier": "silver"})
    with pytest.raises(ConflictError) as info:
        parent.merge()
    (conflict,) = info.value.conflicts
    assert conflict.path == ("c",)
    assert conflict.base == {"tier": "gold"}
    assert conflict.current == {"tier": "bronze"}


def test_sibling_keys_never_conflict() -> None:
    state = make({"c": {"a": 0, "b": 0}})
    one, two = state.fork("x"), state.fork("y")
    one.set("c.a", 1)
    two.set("c.b", 2)
    one.merge()
    assert two.merge().conflicts == ()
    assert state.get("c") == {"a": 1, "b": 2}


def test_concurrent_creation_of_a_nested_map_keeps_both_children() -> None:
    state = make({})
    one, two = state.fork("x"), state.fork("y")
    one.set("new.a", 1)
    two.set("new.b", 2)
    one.merge()
    two.merge()
    assert state.get("new") == {"a": 1, "b": 2}


# -- row 6: both appended to list p -> both appends kept, no conflict -----------------
def test_concurrent_appends_both_kept() -> None:
    state = make({"log": ["start"]})
    one, two = state.fork("x"), state.fork("y")
    one.append("log", "one")
    two.append("log", "two", "three")
    one.merge()
    result = two.merge()
    assert result.conflicts == ()
    assert state.get("log") == ["start", "one", "two", "three"]


def test_concurrent_appends_to_a_missing_list_both_kept() -> None:
    state = make({})
    one, two = state.fork("x"), state.fork("y")
    one.append("log", 1)
    two.append("log", 2)
    one.merge()
    two.merge()
    assert state.get("log") == [1, 2]


def test_append_against_replaced_list_conflicts() -> None:
    state = make({"log": [1]})
    one, two = state.fork("x"), state.fork("y")
    one.set("log", [])
    two.append("log", 2)
    one.merge()
    with pytest.raises(ConflictError) as info:
        two.merge()
    assert info.value.conflicts[0].incoming == [1, 2]


# -- row 7: deleted p, state wrote p -> conflict ----------------------------------------
def test_delete_against_write_conflicts() -> None:
    state = make({"a": 1})
    writer, deleter = state.fork("w"), state.fork("d")
    writer.set("a", 2)
    deleter.delete("a")
    writer.merge()
    with pytest.raises(ConflictError) as info:
        deleter.merge()
    (conflict,) = info.value.conflicts
    assert conflict.incoming is MISSING
    assert conflict.current == 2
    deleter.merge(resolvers={"a": resolvers.last_writer_wins})
    assert "a" not in state


def test_write_against_delete_conflicts() -> None:
    state = make({"a": 1})
    writer, deleter = state.fork("w"), state.fork("d")
    writer.set("a", 2)
    deleter.delete("a")
    deleter.merge()
    with pytest.raises(ConflictError) as info:
        writer.merge()
    assert info.value.conflicts[0].current is MISSING


def test_delete_only_merges_advance_the_token() -> None:
    state = make({"a": 1, "b": 2})
    before = state.token
    branch = state.fork("d")
    branch.delete("a")
    branch.merge()
    assert state.token > before
    late = state.fork("late")
    assert late.get("a") is None


# -- judged against the fork base, not the current state -------------------------------
def test_conflicts_judged_against_fork_base_with_initialised_fields() -> None:
    fields = {f"f{i}": None for i in range(25)}
    state = make(fields)
    branches = [state.fork(f"agent{i}") for i in range(25)]
    for i, branch in enumerate(branches):
        branch.set(f"f{i}", f"result {i}")
    for branch in reversed(branches):
        assert branch.merge().conflicts == ()
    assert state.snapshot() == {f"f{i}": f"result {i}" for i in range(25)}


def test_branch_reads_are_a_snapshot_at_the_fork() -> None:
    state = make({"a": 1, "m": {"x": [1, 2]}})
    reader = state.fork("r")
    writer = state.fork("w")
    writer.set("a", 2)
    writer.append("m.x", 3)
    writer.set("n", 1)
    writer.merge()
    assert reader.get("a") == 1
    assert reader.get("m.x") == [1, 2]
    assert reader.get("n") is None
    assert reader.snapshot() == {"a": 1, "m": {"x": [1, 2]}}


# -- merging twice, closing, context managers ----------------------------------------------
def test_merging_twice_changes_nothing() -> None:
    state = make({"a": 1})
    branch = state.fork("x")
    branch.set("a", 2)
    first = branch.merge()
    token = state.token
    assert branch.merge() is first
    assert state.token == token


def test_commit_twice_with_same_base_conflicts_unless_it_has_a_request_id() -> None:
    state = make({"a": 1})
    base = state.token
    state.commit({"a": 2}, base, "x")
    token = state.token
    with pytest.raises(ConflictError) as info:  # two writes since the base, however equal
        state.commit({"a": 2}, base, "x")
    assert info.value.conflicts[0].same_value
    assert state.token == token
    first = state.commit({"b": 1}, token, "x", request_id=7)
    again = state.commit({"b": 1}, token, "x", request_id=7)  # a resend: idempotent
    assert again.token == first.token == state.token
    assert state.get("b") == 1


def test_context_manager_merges_or_discards() -> None:
    state = make({"a": 1})
    with state.fork("x") as b:
        b["a"] = 2
    assert state.get("a") == 2
    with pytest.raises(RuntimeError), state.fork("y") as b2:
        b2["a"] = 3
        raise RuntimeError("agent failed")
    assert state.get("a") == 2
    assert b2.status == "discarded"
    with pytest.raises(BranchClosed):
        b2.set("a", 4)


def test_async_context_manager() -> None:
    state = make({"n": 0})

    async def main() -> None:
        async with state.fork("x") as b:
            await asyncio.sleep(0)
            b.set("m", 1)

    asyncio.run(main())
    assert state.snapshot() == {"n": 0, "m": 1}


# -- commit (OCC form) ---------------------------------------------------------------
def test_commit_with_changes_and_deletes() -> None:
    state = make({"a": 1, "b": 2})
    snapshot, token = state.read()
    result = state.commit({"a": snapshot["a"] + 1, "b": MISSING, "c.d": 4}, token, "occ")
    assert state.snapshot() == {"a": 2, "c": {"d": 4}}
    assert set(result.applied) == {("a",), ("b",), ("c", "d")}
    state.commit([Change("append", ("l",), [1, 2])], state.token, "occ")
    assert state.get("l") == [1, 2]


# -- bad input: typed errors, nothing changes -------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [{1, 2}, object(), 2**64, 2**63 - 1, -(2**63) - 1, {1: "x"}, float("nan"), float("inf"), b"x"],
)
def test_unsupported_values_refused(bad: Any) -> None:
    state = make({"a": 1})
    branch = state.fork("x")
    branch.set("b", 1)
    with pytest.raises(UnsupportedValue) as info:
        branch.set("a", {"deep": [bad]})
    assert info.value.code == "unsupported_value"
    assert isinstance(info.value, TypeError)
    assert branch.get("a") == 1
    assert branch.changes() == (("b",),)


def test_big_ints_round_trip_as_ints() -> None:
    state = make({"big": 2**63 - 2, "small": -(2**63), "n": 7, "f": 2.0**60})
    snap = state.snapshot()
    assert snap == {"big": 2**63 - 2, "small": -(2**63), "n": 7, "f": 2**60}
    assert all(type(v) is int for v in snap.values())
    replica = SharedState()
    replica.apply_update(state.get_update())
    assert replica.snapshot() == snap
    assert type(replica.get("n")) is int


def test_path_errors() -> None:
    state = make({"a": 1, "l": [1]})
    branch = state.fork("x")
    with pytest.raises(WrongType):
        branch.set("a.b", 1)
    with pytest.raises(WrongType):
        branch.append("a", 1)
    with pytest.raises(PathNotFound):
        branch.delete("nope")
    with pytest.raises(KeyError):
        branch["nope"]
    with pytest.raises(KeyError):
        branch.set("", 1)
    with pytest.raises(KeyError):
        branch.set(("a", 1), 1)
    assert branch.changes() == ()
    assert state.snapshot() == {"a": 1, "l": [1]}


def test_keys_with_dots_use_tuples() -> None:
    state = make({})
    with state.fork("x") as b:
        b.set(("urls", "example.com"), 1)
    assert state.snapshot() == {"urls": {"example.com": 1}}
    assert state.get(("urls", "example.com")) == 1


def test_unknown_base_token_is_refused() -> None:
    from crdt_state import UnknownBase, VersionVector

    state = make({"a": 1})
    with pytest.raises(UnknownBase):
        state.commit({"a": 2}, VersionVector({12345: 99}), "x")
    assert state.get("a") == 1


def test_invalid_update_bytes_refused() -> None:
    from crdt_state import InvalidUpdate

    state = make({"a": 1})
    token = state.token
    for garbage in (b"\x01\x02garbage", b"\xff" * 20, b""):
        with pytest.raises(InvalidUpdate):
            state.apply_update(garbage)
    assert state.snapshot() == {"a": 1}
    assert state.token == token


# -- replicas ----------------------------------------------------------------------------
def test_remote_writes_are_concurrent_changes_for_older_branches() -> None:
    primary = make({"a": 1})
    replica = SharedState()
    replica.apply_update(primary.get_update())
    branch = replica.fork("local")
    with primary.fork("remote-agent") as b:
        b.set("a", 2)
    replica.apply_update(primary.get_update(replica.token))
    branch.set("a", 3)
    with pytest.raises(ConflictError) as info:
        branch.merge()
    assert info.value.conflicts[0].current == 2


def test_root_is_a_map_named_state_for_any_yjs_peer() -> None:
    from pycrdt import Doc, Map

    state = make({"a": {"b": [1, "x"]}})
    doc: Doc[Any] = Doc()
    doc.apply_update(state.get_update())
    assert doc.get("state", type=Map).to_py() == {"a": {"b": [1.0, "x"]}}
