"""Property tests of merge semantics against an independent plain-dict model.

Random branches are forked from a random state at random moments, edited with
random set/delete/append operations on a small universe of nested paths, and
merged in random orders. The model in this file recomputes, without using
crdt_state's helpers, which paths the state wrote since each branch's fork,
which branch changes overlap them (every overlap is a conflict, whatever the
values), and what the state must contain afterwards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crdt_state import (
    Branch,
    BranchClosed,
    ConflictError,
    PathNotFound,
    SharedState,
    WrongType,
    resolvers,
)

KEYS = ("a", "b", "c")
PATHS: list[tuple[str, ...]] = (
    [(k1,) for k1 in KEYS]
    + [(k1, k2) for k1 in KEYS for k2 in KEYS]
    + [(k1, k2, k3) for k1 in KEYS for k2 in KEYS for k3 in KEYS]
)

ABSENT: Any = object()

scalars = st.one_of(st.integers(-2, 3), st.sampled_from(["x", "y", ""]), st.none(), st.booleans())
small_lists = st.lists(scalars, max_size=3)
values = st.recursive(
    st.one_of(scalars, small_lists),
    lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
    max_leaves=6,
)
initial_states = st.dictionaries(st.sampled_from(KEYS), values, max_size=3)
paths = st.sampled_from(PATHS)


# -- an independent plain-dict model --------------------------------------------------
def canon(value: Any) -> str:
    """Strict equality key: True is not 1, dict order does not matter."""
    if value is ABSENT:
        return "<absent>"
    return json.dumps(value, sort_keys=True)


def deep(value: Any) -> Any:
    return json.loads(json.dumps(value))


def related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def m_get(root: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = root
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return ABSENT
        node = node[key]
    return node


def m_blocked(root: dict[str, Any], path: tuple[str, ...]) -> bool:
    """True when an ancestor of ``path`` holds a non-map value."""
    node: Any = root
    for key in path[:-1]:
        if key not in node:
            return False
        node = node[key]
        if not isinstance(node, dict):
            return True
    return False


def m_set(root: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Store ``value``, replacing any non-map on the way by a map."""
    node = root
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = deep(value)


def m_delete(root: dict[str, Any], path: tuple[str, ...]) -> bool:
    parent = m_get(root, path[:-1]) if len(path) > 1 else root
    if isinstance(parent, dict) and path[-1] in parent:
        del parent[path[-1]]
        return True
    return False


@dataclass
class BranchModel:
    """What a branch must look like, and the changes it must send."""

    branch: Branch
    base_pos: int  # number of recorded merges at fork time
    base_snap: dict[str, Any]
    view: dict[str, Any]
    writes: dict[tuple[str, ...], str] = field(default_factory=dict)
    appends: dict[tuple[str, ...], list[Any]] = field(default_factory=dict)

    def record(self, path: tuple[str, ...], kind: str) -> None:
        for i in range(1, len(path)):
            if path[:i] in self.writes:
                self.writes[path[:i]] = "set"
                self.appends.pop(path[:i], None)
                return
        for other in [p for p in self.writes if len(p) > len(path) and p[: len(path)] == path]:
            del self.writes[other]
            self.appends.pop(other, None)
        self.writes[path] = kind
        if kind != "append":
            self.appends.pop(path, None)


@dataclass
class World:
    state: SharedState
    model: dict[str, Any]
    log: list[list[tuple[tuple[str, ...], str]]]  # paths written, per merge
    branches: list[BranchModel] = field(default_factory=list)
    counter: int = 0


def fork(world: World) -> BranchModel:
    world.counter += 1
    branch = world.state.fork(f"agent{world.counter}")
    snap = deep(world.model)
    assert canon(world.state.snapshot()) == canon(snap)
    bm = BranchModel(branch, len(world.log), snap, deep(snap))
    world.branches.append(bm)
    return bm


def edit(bm: BranchModel, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["set", "set", "delete", "append"]), label="op")
    path = data.draw(paths, label="path")
    before_snapshot = canon(bm.view)
    before_changes = set(bm.branch.changes())
    if kind == "set":
        value = data.draw(values, label="value")
        if m_blocked(bm.view, path):
            with pytest.raises(WrongType):
                bm.branch.set(path, value)
        else:
            bm.branch.set(path, value)
            m_set(bm.view, path, value)
            bm.record(path, "set")
            return
    elif kind == "delete":
        if m_get(bm.view, path) is ABSENT:
            with pytest.raises(PathNotFound):
                bm.branch.delete(path)
        else:
            bm.branch.delete(path)
            m_delete(bm.view, path)
            bm.record(path, "delete")
            return
    else:
        items = data.draw(st.lists(scalars, min_size=1, max_size=2), label="items")
        current = m_get(bm.view, path)
        if m_blocked(bm.view, path) or (current is not ABSENT and not isinstance(current, list)):
            with pytest.raises(WrongType):
                bm.branch.append(path, *items)
        else:
            bm.branch.append(path, *items)
            if current is ABSENT:
                m_set(bm.view, path, items)
            else:
                current.extend(deep(items))
            if bm.writes.get(path) == "append":
                bm.appends[path].extend(deep(items))
            elif path not in bm.writes and not any(
                path[:i] in bm.writes for i in range(1, len(path))
            ):
                bm.record(path, "append")
                bm.appends[path] = deep(items)
            else:
                bm.record(path, "set")
            return
    # a refused edit leaves the branch unchanged
    assert canon(bm.view) == before_snapshot
    assert set(bm.branch.changes()) == before_changes


def check_reads(bm: BranchModel, data: st.DataObject) -> None:
    """Reads of a branch equal the fork snapshot plus its own edits, whatever the state did."""
    for path in data.draw(st.lists(paths, max_size=6), label="reads"):
        expected = m_get(bm.view, path)
        got = bm.branch.get(path, ABSENT)
        assert canon(got) == canon(expected), (path, got, expected)
        assert (path in bm.branch) == (expected is not ABSENT)
    if data.draw(st.booleans(), label="snapshot"):
        assert canon(bm.branch.snapshot()) == canon(bm.view)


@dataclass
class Expected:
    conflicts: dict[tuple[str, ...], tuple[Any, Any, Any]]  # path -> base, current, incoming
    writes: list[tuple[tuple[str, ...], str]]
    model_after: dict[str, Any]


def expected_merge(world: World, bm: BranchModel) -> Expected:
    since = [w for entry in world.log[bm.base_pos :] for w in entry]
    model = deep(world.model)
    conflicts: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}
    writes: list[tuple[tuple[str, ...], str]] = []

    def write(path: tuple[str, ...], kind: str, value: Any) -> None:
        if kind == "delete" or value is ABSENT:
            if m_delete(model, path):
                writes.append((path, "delete"))
        elif kind == "append":
            current = m_get(model, path)
            if isinstance(current, list):
                current.extend(deep(value))
            else:
                m_set(model, path, value)
            writes.append((path, "append"))
        else:
            # a list written where there was none is recorded as an append to an empty list
            created = (
                isinstance(value, list)
                and m_get(model, path) is ABSENT
                and not m_blocked(model, path)
            )
            m_set(model, path, value)
            writes.append((path, "append" if created else "set"))

    for path, kind in bm.writes.items():
        incoming = m_get(bm.view, path)
        overlapping = [(w, k) for w, k in since if related(w, path)]
        if not overlapping:
            write(path, kind, bm.appends[path] if kind == "append" else incoming)
        elif kind == "append" and all(w == path and k == "append" for w, k in overlapping):
            write(path, "append", bm.appends[path])  # both appends survive
        else:
            # any overlapping write since the base conflicts, whatever the values
            current = m_get(world.model, path)
            conflicts[path] = (m_get(bm.base_snap, path), current, incoming)
            if canon(current) != canon(incoming):
                write(path, "set", incoming)  # last writer wins; an equal value writes nothing
    return Expected(conflicts, writes, model)


def check_conflicts(found: tuple[Any, ...], expected: Expected) -> None:
    assert {c.path for c in found} == set(expected.conflicts)
    for conflict in found:
        base, current, incoming = expected.conflicts[conflict.path]
        assert canon(_absent(conflict.base)) == canon(base), conflict
        assert canon(_absent(conflict.current)) == canon(current), conflict
        assert canon(_absent(conflict.incoming)) == canon(incoming), conflict
        assert conflict.same_value == (canon(current) == canon(incoming)), conflict


def _absent(value: Any) -> Any:
    from crdt_state import MISSING

    return ABSENT if value is MISSING else value


def merge(world: World, bm: BranchModel, strict: bool, via_commit: bool = False) -> None:
    expected = expected_merge(world, bm)
    state = world.state
    snap: object  # a snapshot, then (idempotence) its canon() text
    if via_commit:
        # the OCC form: the same changes and fork token, judged the same way
        if strict and expected.conflicts:
            snap, token = state.read()
            with pytest.raises(ConflictError) as info:
                state.commit(
                    bm.branch.ops(), bm.branch.base, "occ", default=resolvers.raise_conflict
                )
            check_conflicts(info.value.conflicts, expected)
            assert state.read() == (snap, token)
        result = state.commit(bm.branch.ops(), bm.branch.base, "occ")
        check_conflicts(result.conflicts, expected)
        assert {p for p, _ in expected.writes} == set(result.applied)
        world.log.append(expected.writes)
        world.model = expected.model_after
        assert canon(state.snapshot()) == canon(world.model)
        bm.branch.discard()
        world.branches.remove(bm)
        return
    if strict and expected.conflicts:
        snap, token = state.read()
        with pytest.raises(ConflictError) as info:
            bm.branch.merge(default=resolvers.raise_conflict)
        check_conflicts(info.value.conflicts, expected)
        # nothing applied, the branch stays open and intact
        assert state.read() == (snap, token)
        assert bm.branch.status == "open"
        assert canon(bm.branch.snapshot()) == canon(bm.view)
    result = bm.branch.merge()
    check_conflicts(result.conflicts, expected)
    event(f"merge with {min(len(expected.conflicts), 2)} conflict(s)")
    if any(k == "append" for _, k in expected.writes) and bm.base_pos < len(world.log):
        event("concurrent append merged")
    assert {p for p, _ in expected.writes} == set(result.applied)
    world.log.append(expected.writes)
    world.model = expected.model_after
    assert canon(state.snapshot()) == canon(world.model)
    if expected.writes:
        assert result.token == state.token
        assert result.token > bm.branch.base
    # idempotence: merging again changes nothing
    token, snap = state.token, canon(state.snapshot())
    again = bm.branch.merge()
    assert again.token == result.token
    assert state.token == token and canon(state.snapshot()) == snap
    assert bm.branch.status == "merged"
    with pytest.raises(BranchClosed):
        bm.branch.set("a", 1)
    world.branches.remove(bm)


def run_program(data: st.DataObject, strict: bool) -> None:
    initial = data.draw(initial_states, label="initial")
    state = SharedState(default=resolvers.last_writer_wins)
    world = World(state, {}, [])
    if initial:
        seed = state.fork("seed")
        for key, value in initial.items():
            seed.set(key, value)
        seed.merge()
        world.model = deep(initial)
        world.log.append([((k,), "set") for k in initial])
    assert canon(state.snapshot()) == canon(world.model)
    steps = data.draw(st.integers(1, 30), label="steps")
    for _ in range(steps):
        action = data.draw(st.sampled_from(["fork", "edit", "edit", "edit", "merge", "read"]))
        if action == "fork" or not world.branches:
            fork(world)
            continue
        bm = data.draw(st.sampled_from(world.branches), label="branch")
        if action == "edit":
            edit(bm, data)
        elif action == "read":
            check_reads(bm, data)
        else:
            check_reads(bm, data)
            merge(world, bm, strict, via_commit=data.draw(st.booleans(), label="via commit"))
    # merge the rest in a random order
    for bm in data.draw(st.permutations(list(world.branches)), label="order"):
        check_reads(bm, data)
        merge(world, bm, strict)
    assert canon(state.snapshot()) == canon(world.model)


SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(st.data())
def test_random_branches_merge_like_the_model(data: st.DataObject) -> None:
    """LWW default: conflicts exactly as the model says, final state equals the model."""
    run_program(data, strict=False)


@SETTINGS
@given(st.data())
def test_conflicts_refuse_then_resolve(data: st.DataObject) -> None:
    """raise_conflict first: the error lists exactly the model's conflicts, nothing applied."""
    run_program(data, strict=True)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=initial_states,
    later=st.lists(
        st.tuples(st.sampled_from(["set", "delete", "append"]), paths, values), max_size=12
    ),
    probes=st.lists(paths, min_size=1, max_size=10),
)
def test_read_at_fork_snapshot(
    initial: dict[str, Any], later: list[tuple[str, tuple[str, ...], Any]], probes: list[Any]
) -> None:
    """A branch reads the state as it was at its fork, however the state moved since."""
    state = SharedState(default=resolvers.last_writer_wins)
    if initial:
        state.commit(initial, state.token, "seed")
    reader = state.fork("reader")
    at_fork = state.snapshot()
    for kind, path, value in later:
        writer = state.fork("writer")
        current = m_get(writer.snapshot(), path)
        try:
            if kind == "set":
                writer.set(path, value)
            elif kind == "delete":
                writer.delete(path)
            else:
                writer.append(path, value)
        except (WrongType, PathNotFound):
            assert current is ABSENT or m_blocked(writer.snapshot(), path) or kind == "append"
            writer.discard()
            continue
        writer.merge()
    for path in probes:
        assert canon(reader.get(path, ABSENT)) == canon(m_get(at_fork, path)), path
    assert canon(reader.snapshot()) == canon(at_fork)
