"""A room's awareness map: one state per client by clock, each controlled by one connection."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sync.server._awareness import RoomAwareness, TooManyClients
from sync.wire.awareness import Entry, decode_entries, encode_entries
from sync.wire.errors import ProtocolError


def payload(*entries: tuple[int, int, str]) -> bytes:
    return encode_entries(Entry(*e) for e in entries)


def test_an_echo_is_not_taken_over_and_a_leave_removes_only_what_was_controlled() -> None:
    room = RoomAwareness()
    assert room.receive(payload((1, 1, '{"n":"a"}')), 10) == payload((1, 1, '{"n":"a"}'))
    # connection 20 announces client 2 and echoes client 1
    relayed = room.receive(payload((2, 3, '{"n":"b"}'), (1, 1, '{"n":"a"}')), 20)
    assert relayed == payload((2, 3, '{"n":"b"}'))
    assert room.receive(payload((1, 1, '{"n":"a"}')), 20) is None  # an echo alone: nothing
    assert room.controlled(10) == {1} and room.controlled(20) == {2}
    assert (room.owner(1), room.owner(2)) == (10, 20)
    assert len(room) == 2
    assert room.leave(20) == payload((2, 3, "null"))
    assert room.greeting() == [payload((1, 1, '{"n":"a"}'))]
    assert room.leave(20) is None and room.controlled(20) == set()


def test_a_client_removing_itself_is_no_longer_controlled() -> None:
    room = RoomAwareness()
    room.receive(payload((1, 1, "{}")), 10)
    assert room.receive(payload((1, 1, "null")), 10) == payload((1, 1, "null"))
    assert room.controlled(10) == set() and room.leave(10) is None
    assert room.greeting() == []


def test_a_newer_state_moves_control_and_another_hubs_clients_have_no_owner() -> None:
    room = RoomAwareness()
    room.receive(payload((1, 1, "{}")), 10)
    room.receive(payload((1, 2, "{}")), 20)  # the client moved to connection 20
    assert room.controlled(10) == set() and room.controlled(20) == {1}
    room.receive(payload((1, 3, "{}"), (5, 1, "{}")), None)  # from another hub
    assert room.owner(1) is None and room.owner(5) is None
    assert room.controlled(20) == set() and room.leave(20) is None
    assert [e.client for e, _ in room.clients()] == [1, 5]
    assert room.receive(payload((5, 1, "null")), None) == payload((5, 1, "null"))


def test_the_share_of_a_connection_is_bounded_and_a_refused_update_applies_nothing() -> None:
    room = RoomAwareness(max_controlled=3)
    room.receive(payload(*[(c, 1, "{}") for c in range(3)]), 10)
    before = room.greeting()
    with pytest.raises(TooManyClients):
        room.receive(payload((0, 2, '{"x":1}'), (3, 1, "{}")), 10)
    assert room.greeting() == before and room.controlled(10) == {0, 1, 2}
    # removing one makes room for another, in the same update
    room.receive(payload((0, 1, "null"), (3, 1, "{}")), 10)
    assert room.controlled(10) == {1, 2, 3}
    # another hub's clients count for no connection; a taken-over client leaves its share
    room.receive(payload(*[(c, 1, "{}") for c in range(10, 20)]), None)
    room.receive(payload((1, 2, "{}")), 20)
    room.receive(payload((4, 1, "{}")), 10)
    assert room.controlled(10) == {2, 3, 4} and room.controlled(20) == {1}


def test_a_large_greeting_is_split_within_the_message_limit() -> None:
    room = RoomAwareness(max_controlled=300)
    states = [(c, 1, '{"pad":"%s"}' % ("x" * (c % 50))) for c in range(300)]
    room.receive(payload(*states), 10)
    (whole,) = room.greeting()
    assert decode_entries(whole) == [Entry(*s) for s in states]
    for limit in (60, 500, 2_000, 10_000):
        parts = room.greeting(limit)
        assert all(len(part) <= limit or len(decode_entries(part)) == 1 for part in parts)
        assert all(len(a) + len(b) > limit for a, b in itertools.pairwise(parts))
        assert [e for part in parts for e in decode_entries(part)] == [Entry(*s) for s in states]
    assert len(room.greeting(10)) == 300  # a state larger than the limit goes alone


def test_a_malformed_update_applies_nothing() -> None:
    room = RoomAwareness()
    with pytest.raises(ProtocolError):
        room.receive(payload((1, 1, "{}"))[:-1], 10)
    assert len(room) == 0


connections = st.sampled_from([10, 20, 30, None])
some_entries = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 4), st.sampled_from(["null", "{}", '{"a":1}'])),
    max_size=5,
)


class RoomAwarenessMachine(RuleBasedStateMachine):
    """Random updates from connections and other hubs, and leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.room = RoomAwareness(max_controlled=3)

    @rule(connection=connections, entries=some_entries)
    def receive(self, connection: int | None, entries: list[tuple[int, int, str]]) -> None:
        before = self.room.greeting()
        owners = {e.client: owner for e, owner in self.room.clients()}
        try:
            relayed = self.room.receive(payload(*entries), connection)
        except TooManyClients:
            assert connection is not None
            assert self.room.greeting() == before  # nothing applied
            return
        changed = decode_entries(relayed) if relayed is not None else []
        last = {entry.client: entry for entry in changed}
        for client, entry in last.items():  # what it set is now controlled by the sender
            assert self.room.owner(client) == (None if entry.removed else connection)
            assert (client in self.room.states) != entry.removed
        untouched = {c for c in owners if c not in {e.client for e in changed}}
        assert all(self.room.owner(c) == owners[c] for c in untouched)

    @rule(connection=st.sampled_from([10, 20, 30]))
    def leave(self, connection: int) -> None:
        mine = self.room.controlled(connection)
        others = {e.client: e for e, owner in self.room.clients() if owner != connection}
        removal = self.room.leave(connection)
        removed = decode_entries(removal) if removal is not None else []
        assert {e.client for e in removed} == mine
        assert all(e.removed for e in removed)
        assert {e.client: e for e, _ in self.room.clients()} == others

    @invariant()
    def each_client_is_controlled_once(self) -> None:
        live = {e.client: owner for e, owner in self.room.clients()}
        assert len(self.room) == len(live)
        for connection in (10, 20, 30):
            mine = self.room.controlled(connection)
            assert len(mine) <= 3
            assert mine == {c for c, owner in live.items() if owner == connection}


RoomAwarenessMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30)
test_room_awareness_machine = RoomAwarenessMachine.TestCase
