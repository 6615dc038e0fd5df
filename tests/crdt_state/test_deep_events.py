"""One deep observer per state (``crdt_state._deep``): every event routed, nothing leaked.

A state subscribes to its root's deep events once, the first time it integrates an
update, and routes them to the apply in progress. Checked here: a replica following an
authority reports the same written paths as the authority and holds the same content
(raw events read like pycrdt's wrapped ones, Hypothesis over change sets); events of
local merges and of other applies never reach a sink; a sink's error is raised; one
subscription per document (a new epoch subscribes on the new one); a closed or dropped
state is freed.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Map

from crdt_state import MISSING, Change, SharedState, StateUpdate
from crdt_state._deep import DeepEvents
from crdt_state._document import ROOT
from crdt_state._events import collect_writes, mirror_writes, root_most
from crdt_state.conflicts import WriteKind

KEYS = ("a", "b", "c")
SCALARS = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans(), st.none())
VALUES = st.one_of(
    SCALARS,
    st.dictionaries(st.sampled_from(("x", "y")), SCALARS, max_size=2),
    st.lists(SCALARS, max_size=3),
)
CHANGES = st.one_of(
    st.builds(lambda k, v: Change("set", (k,), v), st.sampled_from(KEYS), VALUES),
    st.builds(lambda k, v: Change("set", (k, "x"), v), st.sampled_from(KEYS), SCALARS),
    st.builds(lambda k: Change("delete", (k,)), st.sampled_from(KEYS)),
    st.builds(
        lambda k, v: Change("append", (k,), v),
        st.sampled_from(KEYS),
        st.lists(SCALARS, min_size=1, max_size=2),
    ),
)


def _merge_all(state: SharedState, batches: list[list[Change]]) -> None:
    """Commit each batch on ``state``; batches refused (wrong shape for the path) are skipped."""
    for n, batch in enumerate(batches):
        by_path = {c.path: c for c in batch}  # one change per path
        try:
            state.commit(list(by_path.values()), state.token, f"agent{n % 3}")
        except Exception:  # e.g. appending to a map: refused, nothing written
            continue


class _Reference:
    """The way updates were integrated before: a fresh pycrdt ``observe_deep`` per update."""

    def __init__(self) -> None:
        self.doc: Doc[Any] = Doc()
        self.root = self.doc.get(ROOT, type=Map)
        self.mirror: dict[str, Any] = {}

    def apply(self, update: bytes) -> dict[tuple[str, ...], WriteKind]:
        changed: dict[Any, Any] = {}
        sub = self.root.observe_deep(collect_writes(changed, self.mirror))
        try:
            self.doc.apply_update(update)
        finally:
            self.root.unobserve(sub)
        writes = root_most(changed)
        mirror_writes(self.doc, self.mirror, writes)
        return writes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(CHANGES, min_size=1, max_size=3), min_size=1, max_size=8))
def test_a_replica_records_what_wrapped_events_record(batches: list[list[Change]]) -> None:
    authority = SharedState()
    told: list[StateUpdate] = []
    authority.subscribe(told.append)
    _merge_all(authority, batches)
    replica = SharedState(follower=True)
    reference = _Reference()
    for change in told:
        expected = reference.apply(change.update)
        result = replica.apply_update(change.update, agent=change.agent)
        # the same paths (pycrdt lists a map event's keys in no fixed order, either way)
        assert sorted(result.applied) == sorted(expected)
        if expected:
            last = list(replica._core.log.entries())[-1]
            assert last.writes == expected  # the kinds too (append, set, delete)
    assert replica.snapshot() == authority.snapshot() == reference.mirror
    assert replica.token == authority.token
    assert replica._core.deep.attachments == (1 if told else 0)


def test_local_merges_and_later_applies_reach_no_earlier_sink() -> None:
    authority = SharedState()
    updates: list[bytes] = []
    authority.subscribe(lambda change: updates.append(change.update))
    authority.commit({"a": 1}, authority.token, "x")
    authority.commit({"b": [1]}, authority.token, "x")
    replica = SharedState()
    first = replica.apply_update(updates[0])
    assert first.applied == (("a",),)
    replica.commit({"c": {"x": 1}}, replica.token, "local")  # no sink routed: ignored
    second = replica.apply_update(updates[1])
    assert second.applied == (("b",),)  # neither "a" nor the local "c"
    assert replica._core.deep.attachments == 1


def test_events_reach_the_sink_only_inside_the_block() -> None:
    state = SharedState()
    core = state._core
    seen: list[list[str]] = []

    def sink(events: list[Any]) -> None:  # raw events are only valid during the call
        seen.extend(list(e.keys) for e in events)

    with core.deep.routed(core.root, sink):
        core.root["k"] = 1
    assert seen == [["k"]]
    core.root["j"] = 2
    assert seen == [["k"]]


def test_a_sinks_error_is_raised_when_the_block_ends() -> None:
    state = SharedState()
    core = state._core

    def broken(events: list[Any]) -> None:
        raise ValueError("sink failed")

    with pytest.raises(ValueError, match="sink failed"), core.deep.routed(core.root, broken):
        core.root["k"] = 1
    seen: list[Any] = []
    with core.deep.routed(core.root, seen.extend):  # the router works again afterwards
        core.root["k"] = 2
    assert len(seen) == 1


def test_routes_do_not_nest() -> None:
    state = SharedState()
    core = state._core
    with (
        core.deep.routed(core.root, lambda events: None),
        pytest.raises(RuntimeError),
        core.deep.routed(core.root, lambda events: None),
    ):
        pass


def test_a_new_document_is_subscribed_once_and_the_old_one_dropped() -> None:
    router = DeepEvents()
    first, second = SharedState(), SharedState()
    seen: list[Any] = []
    with router.routed(first._core.root, seen.extend):
        first._core.root["k"] = 1
    with router.routed(second._core.root, seen.extend):
        second._core.root["k"] = 1
        first._core.root["k"] = 2  # the old document's events are no longer routed
    assert len(seen) == 2
    assert router.attachments == 2
    router.detach()
    assert not router.attached


def test_a_new_document_of_the_state_is_subscribed_again() -> None:
    source = SharedState()
    updates: list[bytes] = []
    source.subscribe(lambda change: updates.append(change.update))
    source.commit({"a": 1}, source.token, "x")
    source.commit({"a": 2, "b": 3}, source.token, "x")
    state = SharedState()
    assert state.apply_update(updates[0]).applied == (("a",),)
    old_root = state._core.root
    state._core.replace_document(type(state._core.doc)())
    assert state._core.root is not old_root and not state._core.deep.attached
    result = state.apply_update(source.get_update())
    assert set(result.applied) == {("a",), ("b",)}
    assert state._core.deep.attachments == 2


def _dropped(make: Any) -> bool:
    ref = weakref.ref(make())
    gc.collect()
    return ref() is None


def test_a_state_that_applied_updates_is_freed(tmp_path: Path) -> None:
    source = SharedState()
    source.commit({"a": {"x": 1}}, source.token, "x")
    update = source.get_update()

    def in_memory() -> SharedState:
        state = SharedState()
        state.apply_update(update)
        return state

    def closed() -> SharedState:
        state = SharedState.open(tmp_path / "s.db")
        state.apply_update(update)
        state.close()
        return state

    assert _dropped(in_memory)
    assert _dropped(closed)
    reopened = SharedState.open(tmp_path / "s.db")  # replayed through the router
    assert reopened.get("a") == {"x": 1}
    assert reopened._core.deep.attachments == 1
    assert not reopened._core.deep.attached  # dropped after the replay: local merges pay nothing
    reopened.apply_update(update)
    assert reopened._core.deep.attached
    reopened.close()
    assert not reopened._core.deep.attached


def test_deleted_paths_are_routed() -> None:
    source = SharedState()
    updates: list[bytes] = []
    source.subscribe(lambda change: updates.append(change.update))
    source.commit({"a": 1, "b": [1]}, source.token, "x")
    source.commit({"a": MISSING}, source.token, "x")
    replica = SharedState(follower=True)
    replica.apply_update(updates[0])
    assert replica.apply_update(updates[1]).applied == (("a",),)
    assert replica.snapshot() == {"b": [1]}
