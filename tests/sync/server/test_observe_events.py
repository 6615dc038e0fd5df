"""The inspector feed's JSON events, built from records without any network."""

from __future__ import annotations

import json

from crdt_state import MISSING, UNRESOLVED, Conflict, SharedState, StateUpdate, resolvers
from sync.server.observe.events import awareness_states, change_event, jsonable, merge_event
from sync.wire import protocol as p
from sync.wire.changes import ErrorRecord
from sync.wire.convert import conflict_to_record
from sync.wire.lib0 import encode_var_string, encode_var_uint


def test_values_json_cannot_carry_are_tagged() -> None:
    assert jsonable({"a": [1.0, 2.5, b"\x00"], "m": MISSING, "u": UNRESOLVED}) == {
        "a": [1, 2.5, {"$bytes": "AA=="}],
        "m": {"$missing": True},
        "u": {"$unresolved": True},
    }
    assert jsonable((1, "x")) == [1, "x"] and jsonable(object()).startswith("<object")


def test_a_change_carries_its_conflicts_with_both_agents() -> None:
    state = SharedState(resolvers={"owner": resolvers.last_writer_wins})
    seen: list[StateUpdate] = []
    state.subscribe(seen.append)
    state.commit({"owner": "nobody"}, state.token, "alice")
    base = state.token
    state.commit({"owner": "alice"}, base, "alice")
    state.commit({"owner": "bob"}, base, "bob")
    event = change_event(seen[-1])
    assert event["type"] == "change" and event["agent"] == "bob" and event["paths"] == [["owner"]]
    (conflict,) = event["conflicts"]
    assert (conflict["current_agent"], conflict["incoming_agent"]) == ("alice", "bob")
    assert (conflict["base"], conflict["current"], conflict["incoming"]) == (
        "nobody",
        "alice",
        "bob",
    )
    assert conflict["policy"] == "last_writer_wins" and conflict["resolution"] == "bob"
    json.dumps(event)  # all of it is JSON


def test_a_refused_merge_reads_as_an_error_with_unresolved_conflicts() -> None:
    conflict = Conflict(("n",), 1, 2, 3, "a", "b")
    frame = p.encode_merge_result(
        7,
        p.MergeStatus.ERROR,
        SharedState().token.to_state(),
        conflicts=[conflict_to_record(conflict)],
        error=ErrorRecord("conflict", "not settled"),
    )
    event = merge_event(frame, "b")
    assert event is not None and event["status"] == "error" and event["agent"] == "b"
    assert event["error"] == {"code": "conflict", "message": "not settled"}
    (record,) = event["conflicts"]
    assert record["resolution"] == {"$unresolved": True} and record["policy"] is None
    assert merge_event(b"\xff\xff", "b") is None  # not a frame
    assert merge_event(p.encode_update(b"\x00\x00"), "b") is None  # not a merge result


def test_awareness_states_are_decoded_and_retirements_kept() -> None:
    def entry(client: int, clock: int, text: str) -> bytes:
        return encode_var_uint(client) + encode_var_uint(clock) + encode_var_string(text)

    payload = encode_var_uint(3) + entry(1, 1, '{"agent": "a"}') + entry(2, 4, "null")
    payload += entry(3, 1, "not json")
    assert awareness_states(payload) == {1: {"agent": "a"}, 2: None, 3: "not json"}
    assert awareness_states(payload[:-2]) == {}  # truncated
    # nested past the stack (a read-only client's 60 KB state blinded the inspector), or
    # past MAX_DEPTH (a feed's encoding would break): kept as text, the rest decoded
    deep, mid = "[" * 30_000 + "]" * 30_000, "[" * 100 + "]" * 100
    payload = encode_var_uint(3) + entry(1, 1, deep) + entry(2, 1, mid) + entry(3, 1, "[[1]]")
    assert awareness_states(payload) == {1: deep, 2: mid, 3: [[1]]}
