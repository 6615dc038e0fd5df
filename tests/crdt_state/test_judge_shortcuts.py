"""The merge path's shortcuts (issue 11, third round) answer exactly as the general code.

* :func:`check_commit` skips its ABC checks for a list, a :class:`VersionVector` and a
  non-empty str: same outcome as the full checks for any arguments.
* :func:`prepare_changes` reuses a ``set`` change whose path and value preparing left
  as they were, and checks a single change for repeated paths not at all: the same
  changes (or the same error) as building every change afresh.
* :meth:`PolicyTable.overlay` hands back its last overlay for the same default object:
  that table decides every path as a fresh one would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from crdt_state import MISSING, Change, SharedState, VersionVector, resolvers
from crdt_state._merge import prepare_changes
from crdt_state._state_args import _check_commit, check_commit
from crdt_state.errors import CrdtStateError, WrongType
from crdt_state.paths import parse_path
from crdt_state.planner import check_disjoint
from crdt_state.resolvers import PolicyTable


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:  # compared whole: type, text, path, details
        details = getattr(exc, "details", None)
        return "error", (type(exc), str(exc), getattr(exc, "path", None), details)


keys = st.sampled_from(["a", "b", "c", "", "a.b"])
paths = st.one_of(
    st.lists(keys, max_size=3).map(tuple),
    st.lists(keys, max_size=2),
    keys,
    st.just(("a", 1)),
    st.integers(),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(),
    st.text(max_size=3),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.tuples(scalars),
    st.dictionaries(st.sampled_from(["x", "y"]), scalars, max_size=2),
    st.just(MISSING),
    st.just(object()),
)
kinds = st.sampled_from(["set", "set", "delete", "append", "merge"])
common = st.builds(  # the hub's: a set of a scalar at a tuple path (the change is reused)
    Change,
    st.just("set"),
    st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2).map(tuple),
    scalars,
)
changes = st.one_of(st.builds(Change, kinds, paths, values), common)
change_lists = st.lists(st.one_of(changes, changes, st.integers()), max_size=3)
arguments = st.one_of(
    change_lists,
    change_lists.map(tuple),
    st.dictionaries(st.one_of(keys, st.lists(keys, max_size=2).map(tuple)), values, max_size=2),
    st.just("a=1"),
    st.just(b""),
    st.integers(),
    st.none(),
)
bases = st.one_of(st.just(VersionVector()), st.just(VersionVector({1: 2})), st.none(), st.text())
agents = st.one_of(st.text(max_size=3), st.none(), st.integers())


@settings(max_examples=500, deadline=None)
@given(arguments, bases, agents)
def test_check_commit_shortcut_answers_as_the_full_checks(
    changes: object, base: object, agent: object
) -> None:
    assert _outcome(check_commit, changes, base, agent) == _outcome(
        _check_commit, changes, base, agent
    )


def _prepare_reference(state: SharedState, given: Mapping[Any, Any] | Iterable[Change]) -> Any:
    """prepare_changes before the shortcuts: every change built afresh, always checked."""
    core = state._core
    items: Iterable[Any]
    if isinstance(given, Mapping):
        items = [
            Change("delete", parse_path(p)) if v is MISSING else Change("set", parse_path(p), v)
            for p, v in given.items()
        ]
    else:
        items = given
    ops: list[Change] = []
    for op in items:
        if not isinstance(op, Change):
            raise WrongType(
                "changes are {path: value} or Change objects, not a sequence of "
                f"{type(op).__name__}",
                details={"item": repr(op)[:80]},
            )
        path = parse_path(op.path)
        if op.kind == "set":
            ops.append(Change("set", path, core.prepare_value(path, op.value)))
        elif op.kind == "delete":
            ops.append(Change("delete", path))
        elif op.kind == "append":
            if not isinstance(op.value, (list, tuple)):
                raise WrongType("append takes a list of items", path=path)
            ops.append(Change("append", path, core.prepare_items(path, list(op.value))))
        else:
            raise CrdtStateError(f"unknown change kind {op.kind!r}", path=path)
    check_disjoint(ops)
    return ops


class _Inner(BaseModel):
    x: str = ""


class _Model(BaseModel):
    a: int = 0
    b: _Inner = _Inner()


def _typed(ops: Any) -> Any:
    """Changes with the types of their values (``1 == 1.0 == True`` hides a difference)."""
    if not isinstance(ops, list):
        return ops
    return [(op.kind, op.path, repr(op.value), type(op.value)) for op in ops]


@settings(max_examples=500, deadline=None)
@given(arguments, st.booleans())
def test_prepare_changes_shortcuts_give_the_same_changes(changes: Any, schema: bool) -> None:
    state = SharedState(schema=_Model) if schema else SharedState()
    got = _outcome(prepare_changes, state._core, changes)
    want = _outcome(_prepare_reference, state, changes)
    assert got[0] == want[0]
    if got[0] == "ok":
        assert _typed(got[1]) == _typed(want[1])
    else:
        assert got == want


policies = st.sampled_from(
    [resolvers.last_writer_wins, resolvers.first_writer_wins, resolvers.raise_conflict, None]
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(policies, min_size=1, max_size=6),
    st.dictionaries(st.sampled_from(["a", "a.b", "c.*"]), policies.filter(bool), max_size=2),
    st.lists(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3), max_size=4),
)
def test_overlay_reuse_decides_as_a_fresh_table(
    defaults: list[Any], rules: dict[str, Any], probes: list[list[str]]
) -> None:
    table = PolicyTable(rules)
    for default in defaults:
        got = table.overlay(None, default)
        fresh = PolicyTable(None, table.default if default is None else default, parent=table)
        assert got.default is fresh.default
        for probe in probes:
            path = tuple(probe)
            assert got.policy_for(path) is fresh.policy_for(path)
            assert got.has_rule(path) == fresh.has_rule(path)
    assert table.overlay(None, None) is table
    assert table.overlay({}, None) is table
