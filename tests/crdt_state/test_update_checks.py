"""Clocks a peer's update may carry into pycrdt (``crdt_state._update_checks``).

yrs, under pycrdt, keeps clocks in 32 bits and integrates a client's structs past a gap
at once (Yjs waits for the missing ones). Updates that would meet either are told apart
from their bytes: none pycrdt or Yjs writes in order is flagged (no false alarm), every
one with a clock past the limit, a skip or a gap is (no miss), whether the cheap look at
the bytes or the whole read decides.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Array, Doc, Map, Text

from crdt_state import VersionVector
from crdt_state._update_checks import MAX_CLOCK, Problem, clock_problem

ALL_HELD = 2**62  # a document holding every clock: only the clocks themselves matter


def held_all(_client: int) -> int:
    return ALL_HELD


def varuint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def gc_runs(
    client: int, first: int, lengths: list[int], skips: frozenset[int] = frozenset()
) -> bytes:
    """An update of GC runs (Skip runs at the indexes in ``skips``), empty delete set."""
    body = varuint(1) + varuint(len(lengths)) + varuint(client) + varuint(first)
    for i, length in enumerate(lengths):
        body += (b"\x0a" if i in skips else b"\x00") + varuint(length)
    return body + varuint(0)


def root_item(client: int, clock: int, key: str, text: str) -> bytes:
    """One map entry ``key: text`` under the root map ``state``."""
    struct = (
        b"\x28"  # ContentAny, parent key follows, no origins
        + varuint(1)  # parent is a root type, by name
        + varuint(5)
        + b"state"
        + varuint(len(key))
        + key.encode()
        + varuint(1)
        + b"\x77"
        + varuint(len(text.encode()))
        + text.encode()
    )
    return varuint(1) + varuint(1) + varuint(client) + varuint(clock) + struct + varuint(0)


def item_after(client: int, clock: int, origin: tuple[int, int]) -> bytes:
    """One list value inserted after ``origin`` (an item held elsewhere)."""
    struct = b"\x88" + varuint(origin[0]) + varuint(origin[1]) + varuint(1) + b"\x7e"
    return varuint(1) + varuint(1) + varuint(client) + varuint(clock) + struct + varuint(0)


def with_delete_set(update: bytes, ranges: list[tuple[int, int, int]]) -> bytes:
    """``update`` (ending in an empty delete set) with these ``(client, clock, length)``."""
    assert update.endswith(b"\x00")
    ds = varuint(len(ranges))
    for client, clock, length in ranges:
        ds += varuint(client) + varuint(1) + varuint(clock) + varuint(length)
    return update[:-1] + ds


# -- no false alarm ------------------------------------------------------------------------


ops = st.lists(
    st.tuples(
        st.integers(0, 2),  # which client writes
        st.sampled_from(["set", "text", "append", "delete"]),
        st.sampled_from(["a", "b", "c"]),
        st.text(min_size=0, max_size=12),  # CJK, emoji, newlines (0x0a) included
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_updates_written_by_pycrdt_pass_in_order(ops: list[tuple[int, str, str, str]]) -> None:
    docs: list[Doc[Any]] = [Doc(client_id=c) for c in (7, 300_000, 2**40)]
    receiver: Doc[Any] = Doc()
    for who, op, key, text in ops:
        doc = docs[who]
        doc.apply_update(receiver.get_update(doc.get_state()))
        before = doc.get_state()
        root = doc.get("state", type=Map)
        with doc.transaction():
            if op == "set":
                root[key] = text
            elif op == "text":
                root[key] = Text(text)
            elif op == "append":
                if not isinstance(root.get("list"), Array):
                    root["list"] = Array()
                root["list"].append(text)
            elif key in root:
                del root[key]
        update = doc.get_update(before)
        assert clock_problem(update, _vector(receiver).__getitem__) is None
        receiver.apply_update(update)
    whole = receiver.get_update()
    assert clock_problem(whole, lambda _c: 0) is None  # a whole document: no gap either
    assert clock_problem(whole, held_all) is None


def _vector(doc: Doc[Any]) -> defaultdict[int, int]:
    vector = VersionVector.from_state(doc.get_state())
    return defaultdict(int, {client: vector[client] for client in vector})


# -- no miss ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    first=st.one_of(
        st.integers(0, 2**21), st.integers(2**31 - 2**22, 2**31 + 10), st.integers(0, 2**40)
    ),
    lengths=st.lists(
        st.one_of(st.integers(1, 3), st.integers(2**20, 2**21 - 1), st.integers(2**21, 2**32)),
        min_size=1,
        max_size=40,
    ),
    copies=st.integers(1, 1_200),
)
def test_a_gc_run_past_the_limit_is_always_found(
    first: int, lengths: list[int], copies: int
) -> None:
    # many copies of short runs make long updates whose sum passes 2**31 with no wide varuint
    runs = (lengths * copies)[:2_400]
    update = gc_runs(5, first, runs)
    expected_too_far = first + sum(runs) - 1 > MAX_CLOCK
    problem = clock_problem(update, held_all)
    assert (problem is not None) == expected_too_far, (first, len(runs), problem)
    if problem is not None:
        assert not problem.waits


def test_the_limit_itself() -> None:
    assert clock_problem(gc_runs(5, MAX_CLOCK, [1]), held_all) is None
    problem = clock_problem(gc_runs(5, MAX_CLOCK, [2]), held_all)
    assert problem is not None and str(MAX_CLOCK + 1) in problem.reason and not problem.waits
    problem = clock_problem(gc_runs(5, 2**32 + 3, [1]), held_all)  # pycrdt read it as 3
    assert problem is not None and not problem.waits


def test_an_origin_past_the_limit_is_found() -> None:
    assert clock_problem(item_after(9, 0, (5, 12)), held_all) is None
    problem = clock_problem(item_after(9, 0, (5, 2**32 + 12)), held_all)
    assert problem is not None and "above" in problem.reason


def test_a_delete_set_past_the_limit_is_found() -> None:
    base = root_item(9, 0, "k", "v")
    assert clock_problem(with_delete_set(base, [(5, 10, 3)]), held_all) is None
    problem = clock_problem(with_delete_set(base, [(5, MAX_CLOCK - 1, 3)]), held_all)
    assert problem is not None and not problem.waits


def test_a_skip_is_refused() -> None:
    problem = clock_problem(gc_runs(5, 0, [2, 3, 1], skips=frozenset({1})), held_all)
    assert problem == Problem("it skips clocks 2-4 of client 5")


# -- gaps --------------------------------------------------------------------------------------


@pytest.mark.parametrize("first", [0, 3, 4])
def test_structs_starting_within_what_is_held_pass(first: int) -> None:
    assert clock_problem(root_item(9, first, "k", "v"), lambda _c: 4) is None


@pytest.mark.parametrize(
    "update",
    [
        root_item(9, 5, "k", "v"),  # one client: settled from its header
        root_item(9, 5, "k", "line\nbreak"),  # a 0x0a byte: read whole
        gc_runs(9, 1_000, [1]),
    ],
)
def test_structs_starting_past_what_is_held_wait(update: bytes) -> None:
    problem = clock_problem(update, lambda _c: 4)
    assert problem is not None and problem.waits and "client 9" in problem.reason


def test_garbage_that_looks_like_a_gap_is_read_whole() -> None:
    with pytest.raises(ValueError):
        clock_problem(b"\x01\x02garbage", lambda _c: 0)
