"""Awareness updates and their clock rules (y-protocols ``applyAwarenessUpdate``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.wire.awareness import (
    AwarenessStates,
    Entry,
    decode_entries,
    encode_entries,
    is_null,
)
from sync.wire.errors import ProtocolError

clients = st.integers(0, 5)
clocks = st.integers(0, 6)
texts = st.sampled_from(["null", '{"a":1}', '{"a":2}', "{}", " null "])
entries = st.builds(Entry, clients, clocks, texts)
updates = st.lists(st.lists(entries, max_size=6), max_size=12)


def y_protocols(updates: list[list[Entry]]) -> tuple[dict[int, str], dict[int, int]]:
    """The rule as y-protocols states it: states and clocks (``meta``) after ``updates``."""
    states: dict[int, str] = {}
    meta: dict[int, int] = {}
    for update in updates:
        for client, clock, text in update:
            null = text.strip() == "null"
            current = meta.get(client, 0)
            if current < clock or (current == clock and null and client in states):
                if null:
                    states.pop(client, None)
                else:
                    states[client] = text
                meta[client] = clock
    return states, meta


@given(updates)
def test_states_follow_the_y_protocols_rule(updates: list[list[Entry]]) -> None:
    kept = AwarenessStates()
    for update in updates:
        kept.apply(update)
    states, meta = y_protocols(updates)
    assert {e.client: e.state for e in kept.entries()} == states
    for client in range(6):
        assert kept.clock(client) == meta.get(client, 0)
    assert len(kept) == len(states) and set(kept) == set(states)


@given(updates)
def test_the_changes_returned_are_what_a_peer_needs(updates: list[list[Entry]]) -> None:
    """A peer applying only the returned changes ends with the same states."""
    kept, peer = AwarenessStates(), AwarenessStates()
    for update in updates:
        peer.apply(kept.apply(update))
        assert peer.entries() == kept.entries()
        assert kept.apply(update) == []  # the same update again changes nothing


@given(updates)
def test_plan_then_commit_is_apply(updates: list[list[Entry]]) -> None:
    one, two = AwarenessStates(), AwarenessStates()
    for update in updates:
        planned = two.plan(update)
        assert two.entries() == one.entries()  # planning changes nothing
        assert two.commit(planned) == one.apply(update)


def test_a_removal_is_at_the_clock_held_and_its_clock_is_kept() -> None:
    kept = AwarenessStates()
    kept.apply([Entry(1, 4, '{"a":1}'), Entry(2, 1, "{}")])
    assert kept.remove([1, 3]) == [Entry(1, 4, "null")]  # 3 holds nothing
    assert 1 not in kept and kept.clock(1) == 4
    assert kept.apply([Entry(1, 4, '{"a":1}')]) == []  # a late echo of the removed state
    assert kept.apply([Entry(1, 5, '{"a":2}')]) == [Entry(1, 5, '{"a":2}')]
    assert kept.get(1) == Entry(1, 5, '{"a":2}') and kept.get(7) is None


def test_a_null_for_a_client_without_state_records_its_clock_only() -> None:
    kept = AwarenessStates()
    assert kept.apply([Entry(9, 3, "null")]) == []
    assert kept.clock(9) == 3 and len(kept) == 0
    assert kept.apply([Entry(9, 3, "{}")]) == []
    assert kept.apply([Entry(9, 4, "{}")]) == [Entry(9, 4, "{}")]


def test_the_clocks_of_removed_clients_are_bounded() -> None:
    kept = AwarenessStates(max_gone=4)
    kept.apply([Entry(c, 2, "{}") for c in range(10)])
    kept.remove(range(10))
    assert [kept.clock(c) for c in range(10)] == [0] * 6 + [2] * 4  # the newest kept
    kept.clear()
    assert kept.clock(9) == 0 and kept.entries() == []


@given(st.lists(st.tuples(st.integers(0, 2**53 - 1), st.integers(0, 2**53 - 1), texts)))
def test_entries_round_trip(items: list[tuple[int, int, str]]) -> None:
    entries = [Entry(*item) for item in items]
    assert decode_entries(encode_entries(entries)) == entries


def test_null_states_and_malformed_payloads() -> None:
    assert is_null(" null\n") and not is_null('"null"')
    for bad in (b"", b"\x01", b"\x01\x01\x01\x05ab", b"\x00\x00"):
        with pytest.raises(ProtocolError):
            decode_entries(bad)
