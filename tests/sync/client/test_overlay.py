"""The overlay's pure logic: applying changes, and which earlier merges a merge builds on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crdt_state import MISSING, Change
from sync.client._overlay import OverlayEntry, apply_changes, chain_of, depends_on, view_of_key


def test_apply_changes_writes_as_the_hub_would() -> None:
    tree = {"a": {"x": 1}, "n": 5, "log": ["a"]}
    apply_changes(
        tree,
        [
            Change("set", ("a", "y"), 2),
            Change("delete", ("n",)),
            Change("delete", ("absent",)),
            Change("append", ("log",), ["b"]),
            Change("append", ("new",), [1]),
            Change("set", ("n", "below"), 1),  # n is gone: a map is created, as a set would
            Change("set", ("log", "below"), 1),  # below a list: refused by the hub, skipped
        ],
    )
    assert tree == {"a": {"x": 1, "y": 2}, "log": ["a", "b"], "new": [1], "n": {"below": 1}}


def test_view_of_key_applies_only_that_keys_changes_and_copies() -> None:
    base = {"x": 1}
    entries = [
        OverlayEntry(1, 10, (Change("set", ("k", "y"), 2), Change("set", ("other",), 0))),
        OverlayEntry(2, 11, (Change("delete", ("k", "x")),)),
    ]
    assert view_of_key(base, "k", entries) == {"y": 2}
    assert base == {"x": 1}
    assert view_of_key(MISSING, "other", entries) == 0
    assert view_of_key(MISSING, "none", entries) is MISSING


paths = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map(tuple)
changes = st.builds(
    lambda kind, path: Change(kind, path, MISSING if kind == "delete" else [1]),
    st.sampled_from(["set", "delete", "append"]),
    paths,
)


@given(
    st.lists(st.lists(changes, min_size=1, max_size=3), max_size=6),
    # one change set names each path once (commit refuses anything else)
    st.lists(changes, min_size=1, max_size=3, unique_by=lambda c: c.path),
)
def test_chain_of_is_the_entries_a_merge_depends_on(
    earlier: list[list[Change]], ops: list[Change]
) -> None:
    entries = [OverlayEntry(i, 100 + i, tuple(c)) for i, c in enumerate(earlier)]
    assert chain_of(entries, ops) == [e for e in entries if depends_on(e.ops, ops)]


def test_appends_to_one_list_do_not_chain_but_a_set_does() -> None:
    earlier = OverlayEntry(1, 7, (Change("append", ("log",), [1]),))
    assert chain_of([earlier], [Change("append", ("log",), [2])]) == []
    assert chain_of([earlier], [Change("set", ("log",), [])]) == [earlier]
    assert chain_of([earlier], [Change("set", ("log", "x"), 1)]) == [earlier]
    assert chain_of([earlier], [Change("set", ("logs",), 1)]) == []
