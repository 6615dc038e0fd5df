"""What a state does before pycrdt sees a peer's update: clocks, waiting, the trial.

- A peer's updates out of order wait for the clocks before them and land after them,
  as in Yjs (pycrdt alone integrates them at once and parts from the peer for good).
- An update with a clock pycrdt's 32 bits cannot hold is refused, nothing changed.
- A state holds a bounded number of waiting updates.
- An update pycrdt refuses half-way leaves the document as it was: it is tried on a
  copy first (``crdt_state._trial``), which a state that only merges never builds.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pycrdt import Doc, Map, Text
from pydantic import BaseModel
from yjs_writes import built_on, one_update_per_write

from crdt_state import InvalidUpdate, SchemaError, SharedState
from crdt_state._update_checks import MAX_CLOCK
from crdt_state._waiting import MAX_HELD_BYTES, MAX_UPDATES

WRITES = [("a", 1), ("b", 2), ("a", 3)]
FINAL = {"a": 3, "b": 2}


def test_pycrdt_alone_parts_from_a_peer_whose_updates_come_out_of_order() -> None:
    # the fact the waiting is for: without it this replica never sees a = 3
    u1, u2, u3 = one_update_per_write(9, WRITES)
    replica: Doc[Any] = Doc()
    for update in (u2, u3, u1):
        replica.apply_update(update)
    assert replica.get("state", type=Map).to_py() != FINAL


def test_out_of_order_updates_wait_and_land_in_order() -> None:
    u1, u2, u3 = one_update_per_write(9, WRITES)
    state = SharedState()
    changes: list[Any] = []
    state.subscribe(changes.append)
    start = state.token
    assert state.held_bytes == 0
    held = 0
    for update in (u2, u3):
        result = state.apply_update(update, agent="peer")
        assert result.pending and result.token == start and not result.applied
        held += len(update)
        assert state.held_bytes == held
    assert state.snapshot() == {}
    result = state.apply_update(u1, agent="peer")
    assert state.snapshot() == FINAL
    assert result.applied and not result.pending
    assert state.held_bytes == 0
    assert [change.agent for change in changes] == ["peer", "peer", "peer"]
    # the same update again, and one already held: nothing waits, nothing changes
    assert not state.apply_update(u2).pending
    assert state.snapshot() == {"a": 3, "b": 2}


def test_a_write_built_on_an_unseen_update_is_held_and_counted_until_it_comes() -> None:
    # peer 2 edits a key that peer 1 wrote; this state never got peer 1's write
    one: Doc[Any] = Doc(client_id=1)
    one["state"] = Map()
    one.get("state", type=Map)["note"] = "first"
    base = one.get_update()
    edit = built_on(base, 2, "note", "edited")
    state = SharedState()
    state.apply_update(edit, agent="two")
    assert state.snapshot() == {} and state.held_bytes > 0  # kept pending, as Yjs does
    state.apply_update(base, agent="one")
    assert state.snapshot() == {"note": "edited"}
    assert state.held_bytes == 0


def test_waiting_is_bounded() -> None:
    state = SharedState()
    source: Doc[Any] = Doc(client_id=9)
    root = source.get("state", type=Map)
    root["first"] = 0  # never sent: everything after it waits
    updates = []
    for i in range(MAX_UPDATES + 1):
        before = source.get_state()
        root[f"k{i}"] = i
        updates.append(source.get_update(before))
    for update in updates[:MAX_UPDATES]:
        assert state.apply_update(update).pending
    with pytest.raises(InvalidUpdate) as info:
        state.apply_update(updates[MAX_UPDATES])
    assert info.value.code == "invalid_update"
    assert info.value.details["waiting"] == MAX_UPDATES
    assert state.held_bytes == sum(map(len, updates[:MAX_UPDATES]))  # not the refused one
    assert state.snapshot() == {}


class Doc2(BaseModel):
    n: int = 0
    s: str = ""


def test_a_waiting_update_refused_when_it_lands_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    typed = SharedState(schema=Doc2)
    source: Doc[Any] = Doc(client_id=9)
    source.apply_update(typed.get_update())
    root = source.get("state", type=Map)
    before = source.get_state()
    root["n"] = 1
    good = source.get_update(before)
    before = source.get_state()
    root["n"] = "not a number"
    bad = source.get_update(before)
    assert typed.apply_update(bad).pending
    with caplog.at_level(logging.WARNING, logger="crdt_state"):
        typed.apply_update(good)
    assert typed.get("n") == 1
    assert any("waited for earlier clocks is refused" in r.getMessage() for r in caplog.records)
    with pytest.raises(SchemaError):  # sent again, it is refused to its sender's face
        typed.apply_update(bad)


def _clock_update(client: int, clock: int) -> bytes:
    def varuint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            if not n:
                return bytes([*out, byte])
            out.append(byte | 0x80)

    item = b"\x28" + varuint(1) + varuint(5) + b"state" + varuint(1) + b"k" + b"\x01\x77\x01v"
    return b"\x01\x01" + varuint(client) + varuint(clock) + item + b"\x00"


def test_a_clock_past_32_bits_is_refused_and_changes_nothing() -> None:
    # pycrdt reads clock 2**32 as 0: alone it would take this as the peer's first write
    state = SharedState()
    state.commit({"n": 3}, state.token, "x")
    before = (state.token, state.get_update())
    with pytest.raises(InvalidUpdate) as info:
        state.apply_update(_clock_update(9, 2**32))
    assert info.value.details["limit"] == MAX_CLOCK
    assert (state.token, state.get_update()) == before
    peer = SharedState(client_id=2)
    peer.apply_update(state.get_update())
    base = peer.token
    peer.commit({"from_peer": 1}, base, "peer")
    state.apply_update(peer.get_update(base))
    assert state.get("from_peer") == 1


def test_a_state_that_only_merges_builds_no_trial_and_a_follower_has_none() -> None:
    state = SharedState()
    for i in range(5):
        state.commit({"k": i}, state.token, "agent")
    trial = state._core.trial
    assert trial is not None and trial._doc is None
    peer = SharedState(client_id=2)
    peer.apply_update(state.get_update())
    base = peer.token
    peer.commit({"p": 1}, base, "peer")
    state.apply_update(peer.get_update(base))
    assert trial._doc is not None  # built for the peer's update, and kept
    assert SharedState(follower=True)._core.trial is None


def test_an_update_pycrdt_refuses_half_way_leaves_the_document_as_it_was() -> None:
    # the second struct hangs from a map entry that is not a type: pycrdt integrates the
    # first, then refuses ("block parent ... must be deleted or shared ref type")
    state = SharedState()
    state.commit({"n": 3}, state.token, "x")
    writer: Doc[Any] = Doc(client_id=77)
    writer.apply_update(state.get_update())
    value_id = (77, 0)
    before = writer.get_state()
    writer.get("state", type=Map)["plain"] = 1  # clock 0 of client 77: a plain value
    first = writer.get_update(before)
    # struct 1: plain entry "x" (clock 1); struct 2: an entry whose parent is (77, 0)
    second = (
        b"\x01\x02\x4d\x01"
        + b"\x28\x01\x05state\x01x\x01\x77\x01v"
        + b"\x28\x00\x4d\x00\x01y\x01\x77\x01w"
        + b"\x00"
    )
    assert value_id == (77, 0)
    state.apply_update(first)
    snapshot, update = state.snapshot(), state.get_update()
    with pytest.raises(InvalidUpdate):
        state.apply_update(second)
    assert state.snapshot() == snapshot
    assert state.get_update() == update  # nothing of it stayed in the document
    raw: Doc[Any] = Doc()  # the fact: pycrdt alone keeps the first struct
    raw.apply_update(update)
    with pytest.raises(Exception):  # noqa: B017 - pycrdt's own error type
        raw.apply_update(second)
    assert raw.get_update() != update


def test_a_peer_that_appends_to_an_empty_list_and_deletes_it_lands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # its update holds an item born deleted, whose list event has an empty delta: the
    # state used to fail reading it and refuse an update pycrdt had already integrated
    state = SharedState()
    state.commit({"l": []}, state.token, "x")
    peer: Doc[Any] = Doc(client_id=5)
    peer.apply_update(state.get_update())
    before = peer.get_state()
    items = peer.get("state", type=Map)["l"]
    items.append(2)
    del items[0]
    with caplog.at_level(logging.WARNING, logger="crdt_state"):
        result = state.apply_update(peer.get_update(before), agent="peer")
    assert result.applied == () and result.token != before
    assert state.snapshot() == {"l": []}
    assert not caplog.records
    assert state.token.get_clock(5) == 1


def test_events_pycrdt_cannot_report_are_read_from_the_document(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # pycrdt has panicked reading the events of garbage it integrated (a getter of the
    # event): the update is in the document, so the state records it, writes read there
    state = SharedState()
    state.commit({"a": 1, "b": {"c": 2}}, state.token, "x")
    peer = SharedState(client_id=2)
    peer.apply_update(state.get_update())
    base = peer.token
    peer.commit({"b": {"c": 3}, "d": [1]}, base, "peer")

    def unreadable(event: Any, mirror: Any) -> Any:
        raise BaseException("panic in an event getter")  # as pycrdt's PanicException

    monkeypatch.setattr("crdt_state._events.event_changes", unreadable)
    with caplog.at_level(logging.WARNING, logger="crdt_state"):
        result = state.apply_update(peer.get_update(base), agent="peer")
    assert set(result.applied) == {("b",), ("d",)}
    assert state.snapshot() == {"a": 1, "b": {"c": 3}, "d": [1]}
    assert any("could not report" in r.getMessage() for r in caplog.records)


def test_a_peers_y_text_reads_as_its_text() -> None:
    # a stock Yjs client may put a Y.Text in the state's map: read it as a string, as
    # the document's JSON rendering does (it used to stay a live pycrdt object)
    state = SharedState()
    peer: Doc[Any] = Doc(client_id=5)
    root = peer.get("state", type=Map)
    root["t"] = Text("hi")
    state.apply_update(peer.get_update(), agent="peer")
    assert state.snapshot() == {"t": "hi"} and state.get("t") == "hi"
    before = peer.get_state()
    text = root["t"]
    text.insert(2, "!")
    state.apply_update(peer.get_update(before), agent="peer")
    assert state.snapshot() == {"t": "hi!"}


def test_structs_held_for_unseen_origins_are_bounded() -> None:
    # one struct built on an update this state never got, under a new client id each
    # time: each is held, and every later update was tried with all of them
    one: Doc[Any] = Doc(client_id=1)
    one["state"] = Map()
    one.get("state", type=Map)["note"] = "first"
    base = one.get_update()
    state = SharedState()
    client = 100
    with pytest.raises(InvalidUpdate) as info:
        while True:
            client += 1
            update = built_on(base, client, "note", "x" * 2000)
            document = state.get_update()
            state.apply_update(update, agent="flood")
            assert state.held_bytes <= MAX_HELD_BYTES
    assert info.value.code == "invalid_update"
    assert info.value.details["limit"] == MAX_HELD_BYTES
    assert state.get_update() == document  # the refused update changed nothing
    assert MAX_HELD_BYTES - 2100 < state.held_bytes <= MAX_HELD_BYTES
    assert state.held_bytes >= (client - 101) * 2000  # every one before it is held
    # what they build on still lands, and everything held with it
    state.apply_update(base, agent="one")
    assert state.held_bytes == 0
    assert state.get("note") == "x" * 2000
