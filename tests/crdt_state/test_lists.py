"""Lists at any size: list writes and appends are linear (issue 8, reproduction 5).

pycrdt inserts list items one by one, each insert walking the list (O(n^2));
``crdt_state._document`` writes the content of big lists and maps as one
hand-built Yjs update instead. These tests pin down that the result reads back
exactly (in the state, in replicas, after reopening a file), that it is the
very document pycrdt's own API would have written, and that the one update
each merge emits carries everything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from enum import Enum, IntEnum, StrEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Array, Doc, Map
from pydantic import BaseModel

from crdt_state import SharedState, StateUpdate, UnsupportedValue
from crdt_state import _document as ydoc
from crdt_state.values import normalize


# -- data -------------------------------------------------------------------------------
def mixed(n: int, salt: int = 0) -> list[Any]:
    """``n`` items of every storable kind: ints (also beyond 2**53), floats, unicode,
    None, bools, dicts holding lists, nested lists, empty containers."""
    kinds: tuple[Callable[[int], Any], ...] = (
        lambda i: i,
        lambda i: 2**53 + 1 + 2 * i,  # not exact as a double: a Yjs bigint
        lambda i: 2**63 - 2 - i,
        lambda i: -(2**63) + i,
        lambda i: i + 0.5,
        lambda i: 1e300 / (i + 1),
        lambda i: 2.0**63 * (1 + i % 7),  # integral, beyond int64: stays a float
        lambda i: f"é😀日本-{i}",
        lambda i: None,
        lambda i: i % 3 == 0,
        lambda i: {"i": i, "name": f"n{i}", "tags": ["a", i, {"deep": [i, None]}]},
        lambda i: [i, [i, "x", []], {}],
        lambda i: [],
        lambda i: {},
        lambda i: -i - 0.25,
    )
    return [kinds[(i + salt) % len(kinds)](i) for i in range(n)]


def identical(a: Any, b: Any) -> bool:
    """Equal, with the same types everywhere (``1`` is not ``1.0``, ``True`` is not ``1``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def reads_back(state: SharedState, path: str, expected: list[Any]) -> None:
    """``path`` holds ``expected`` in ``state`` and in a replica fed ``get_update()``."""
    assert identical(state.get(path), expected)
    replica = SharedState()
    replica.apply_update(state.get_update())
    assert identical(replica.get(path), expected)
    assert replica.token == state.token


def reopened_reads_back(file: Path, path: str, expected: list[Any]) -> None:
    again = SharedState.open(file)
    try:
        assert identical(again.get(path), expected)
    finally:
        again.close()


@contextlib.contextmanager
def update_path_always() -> Iterator[None]:
    """Route every container write and append through the hand-built update."""
    saved = ydoc.SMALL_VALUE, ydoc.SMALL_APPEND
    ydoc.SMALL_VALUE = ydoc.SMALL_APPEND = -1  # type: ignore[misc]
    try:
        yield
    finally:
        ydoc.SMALL_VALUE, ydoc.SMALL_APPEND = saved  # type: ignore[misc]


# -- round trips at every size -------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 1_000])
@pytest.mark.parametrize("how", ["commit", "set", "extend", "append"])
def test_a_list_of_n_items_reads_back_everywhere(tmp_path: Path, n: int, how: str) -> None:
    file = tmp_path / "state.db"
    state = SharedState.open(file)
    items = mixed(n)
    if how == "commit":
        state.commit({"doc.items": items}, state.token, "w")
    else:
        with state.fork("w") as branch:
            if how == "set":
                branch.set("doc.items", items)
            elif how == "extend":
                branch.extend("doc.items", items)
            else:
                branch.append("doc.items", *items)
    expected = normalize(items)
    reads_back(state, "doc.items", expected)
    state.close()
    reopened_reads_back(file, "doc.items", expected)


@pytest.mark.timeout(20)  # quadratic writes took ~10 s for 16k items; this writes 150k
def test_a_hundred_thousand_items_are_written_and_appended(tmp_path: Path) -> None:
    file = tmp_path / "big.db"
    state = SharedState.open(file)
    items = mixed(100_000)
    state.commit({"big": items}, state.token, "w")
    more = mixed(50_000, salt=5)
    with state.fork("w") as branch:
        branch.extend("big", more)
    expected = normalize(items + more)
    reads_back(state, "big", expected)
    state.close()
    reopened_reads_back(file, "big", expected)


def test_appends_to_a_big_list_keep_their_order(tmp_path: Path) -> None:
    file = tmp_path / "state.db"
    state = SharedState.open(file)
    replica = SharedState()  # fed only the update each merge emits

    def forward(change: StateUpdate) -> None:  # a Listener returns None
        replica.apply_update(change.update)

    state.subscribe(forward)
    expected: list[Any] = []
    steps: list[list[Any]] = [
        mixed(3_000),
        [1],  # small appends go through pycrdt itself
        mixed(2_000, salt=3),
        [{"k": [1, 2]}, "two"],
        mixed(40, salt=7),
        [[]],
        mixed(700, salt=1),
    ]
    for items in steps:
        with state.fork("w") as branch:
            branch.extend("log", items)
        expected += normalize(items)
        assert identical(state.get("log"), expected)
    assert identical(replica.get("log"), expected)
    reads_back(state, "log", expected)
    state.close()
    reopened_reads_back(file, "log", expected)


def test_concurrent_appends_from_two_branches_are_both_kept() -> None:
    state = SharedState()
    base = mixed(1_000)
    state.commit({"items": base}, state.token, "init")
    first, second = state.fork("a"), state.fork("b")
    first.extend("items", mixed(500, salt=2))
    second.extend("items", mixed(700, salt=9))
    second.append("items", "last")
    assert first.merge().conflicts == ()
    assert second.merge().conflicts == ()
    expected = normalize(base + mixed(500, salt=2) + mixed(700, salt=9) + ["last"])
    reads_back(state, "items", expected)


def test_each_merge_emits_one_update_that_holds_all_of_it() -> None:
    state = SharedState()
    changes: list[StateUpdate] = []
    state.subscribe(changes.append)
    items = mixed(1_000)
    state.commit({"a": items, "b": {"inner": items}, "n": 1}, state.token, "w")
    with state.fork("w") as branch:
        branch.extend("a", items)
    assert [change.seq for change in changes] == [1, 2]
    replica = SharedState()
    replica.apply_update(changes[0].update)
    assert identical(replica.get("b.inner"), normalize(items))
    assert identical(replica.get("a"), normalize(items))
    replica.apply_update(changes[1].update)
    assert identical(replica.get("a"), normalize(items + items))
    assert replica.snapshot() == state.snapshot()


# -- big lists next to other Yjs peers -------------------------------------------------------
def peer_of(state: SharedState) -> Doc[Any]:
    peer: Doc[Any] = Doc()
    peer.apply_update(state.get_update())
    return peer


def send(state: SharedState, peer: Doc[Any]) -> None:
    """Exchange everything both ways."""
    state.apply_update(peer.get_update())
    peer.apply_update(state.get_update())


def peer_list(peer: Doc[Any], key: str) -> Any:
    return ydoc.doc_read(peer, (key,))


@pytest.mark.parametrize("keep", [0, 1, 990])
def test_appending_after_deleted_items(keep: int) -> None:
    """A peer deleted the tail (or every item) of the list: appends follow what is left."""
    state = SharedState()
    items = mixed(1_000)
    state.commit({"l": items}, state.token, "w")
    peer = peer_of(state)
    array = peer.get(ydoc.ROOT, type=Map)["l"]
    with peer.transaction():
        del array[keep:]
    send(state, peer)
    assert identical(state.get("l"), normalize(items[:keep]))
    more = mixed(300, salt=4)
    with state.fork("w") as branch:
        branch.extend("l", more)
    expected = normalize(items[:keep] + more)
    assert identical(state.get("l"), expected)
    send(state, peer)
    assert identical(peer_list(peer, "l"), expected)
    reads_back(state, "l", expected)


def test_a_peer_appending_concurrently_converges() -> None:
    state = SharedState()
    state.commit({"l": mixed(500)}, state.token, "w")
    peer = peer_of(state)
    array = peer.get(ydoc.ROOT, type=Map)["l"]
    with peer.transaction():
        array.append("from the peer")
        array.insert(0, "first")
    with state.fork("w") as branch:
        branch.extend("l", mixed(2_000, salt=6))
    send(state, peer)
    got = state.get("l")
    assert identical(peer_list(peer, "l"), got)
    assert got[0] == "first" and "from the peer" in got
    assert len(got) == 2_502
    mine = [v for v in got if v not in ("first", "from the peer")]
    assert identical(mine, normalize(mixed(500) + mixed(2_000, salt=6)))


def test_an_emptied_list_that_a_peer_refills_reads_back() -> None:
    state = SharedState()
    state.commit({"l": mixed(100)}, state.token, "w")
    with state.fork("w") as branch:
        branch.set("l", [])
    with state.fork("w") as branch:
        branch.extend("l", mixed(100, salt=1))
    assert identical(state.get("l"), normalize(mixed(100, salt=1)))
    reads_back(state, "l", normalize(mixed(100, salt=1)))


# -- the same document as pycrdt's own API -------------------------------------------------------
INT64 = st.integers(-(2**63), 2**63 - 2)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.integers(-(2**24) - 2, 2**24 + 2),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=6),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=60, deadline=None)
@given(
    value=st.one_of(st.lists(json_values, max_size=40), st.dictionaries(st.text(), json_values)),
    appends=st.lists(st.lists(json_values, max_size=8), max_size=4),
    before=st.integers(0, 3),
)
def test_the_update_path_writes_what_pycrdt_writes(
    value: Any, appends: list[list[Any]], before: int
) -> None:
    value, appends = normalize(value), normalize(appends)
    fast: Doc[Any] = Doc(client_id=77)
    slow: Doc[Any] = Doc(client_id=77)
    for doc in (fast, slow):  # some earlier writes: clocks do not start at 0
        with doc.transaction():
            for i in range(before):
                ydoc.root(doc)[f"k{i}"] = i
    with update_path_always():
        with fast.transaction():
            ydoc.doc_set(fast, ("v",), value)
        for items in appends:
            with fast.transaction():
                ydoc.doc_extend(fast, ("v",), items)
    with slow.transaction():
        ydoc.root(slow)["v"] = ydoc.to_crdt(value)
    for items in appends:
        with slow.transaction():
            target = ydoc.root(slow)["v"]
            if isinstance(target, Array):
                target.extend([ydoc.to_crdt(v) for v in items])
            else:
                ydoc.root(slow)["v"] = ydoc.to_crdt(items)
    assert fast.get_update() == slow.get_update()
    expected = value
    for items in appends:
        expected = [*expected, *items] if isinstance(expected, list) else items
    assert identical(ydoc.doc_read(fast, ("v",)), expected)
    assert identical(ydoc.doc_read(slow, ("v",)), expected)


class CountingDoc(Doc):  # type: ignore[type-arg]
    """A document that counts the updates applied to it."""

    applied = 0

    def apply_update(self, update: bytes) -> None:
        self.applied += 1
        super().apply_update(update)


@pytest.mark.parametrize(
    ("write", "updates"),
    [
        (lambda doc: ydoc.doc_set(doc, ("v",), list(range(ydoc.SMALL_VALUE))), 0),
        (lambda doc: ydoc.doc_set(doc, ("v",), list(range(ydoc.SMALL_VALUE + 1))), 1),
        (lambda doc: ydoc.doc_set(doc, ("v",), {"a": [[1]] * (ydoc.SMALL_VALUE // 2)}), 1),
        (lambda doc: ydoc.doc_extend(doc, ("l",), [1] * ydoc.SMALL_APPEND), 0),
        (lambda doc: ydoc.doc_extend(doc, ("l",), [1] * (ydoc.SMALL_APPEND + 1)), 1),
        (lambda doc: ydoc.doc_extend(doc, ("l",), [list(range(ydoc.SMALL_VALUE))]), 1),
    ],
)
def test_small_and_big_values_take_their_paths(write: Any, updates: int) -> None:
    doc = CountingDoc(client_id=5)
    with doc.transaction():
        ydoc.root(doc)["l"] = Array([0])
    with doc.transaction():
        write(doc)
    assert doc.applied == updates


class Colour(StrEnum):
    RED = "red"


class Legacy(str, Enum):  # noqa: UP042 (the str mix-in is what is tested)
    OLD = "old"


class Level(IntEnum):
    HIGH = 3


def test_enum_members_are_written_as_their_values() -> None:
    items = [Colour.RED, Legacy.OLD, Level.HIGH, 1.5] * 20
    fast: Doc[Any] = Doc(client_id=8)
    slow: Doc[Any] = Doc(client_id=8)
    with fast.transaction():
        ydoc.doc_set(fast, ("v",), items)
    with slow.transaction():
        ydoc.root(slow)["v"] = Array(items)
    assert fast.get_update() == slow.get_update()
    assert identical(ydoc.doc_read(fast, ("v",)), ["red", "old", 3, 1.5] * 20)


def test_bad_strings_are_refused_before_the_document_changes() -> None:
    doc: Doc[Any] = Doc()
    before = doc.get_update()
    with pytest.raises(UnsupportedValue), doc.transaction():
        ydoc.doc_set(doc, ("v",), ["ok"] * 40 + ["\ud800"])
    assert doc.get_update() == before


# -- typed states ---------------------------------------------------------------------------
class Finding(BaseModel):
    title: str
    score: float = 0.0
    tags: list[str] = []


class Report(BaseModel):
    findings: list[Finding] = []
    ids: list[int] = []


def test_typed_and_plain_states_write_the_same_big_lists() -> None:
    typed = SharedState(schema=Report, client_id=99)
    plain = SharedState(client_id=99)
    plain.commit({"findings": [], "ids": []}, plain.token, "schema")
    findings = [Finding(title=f"t{i}", score=i / 3, tags=["x", str(i)]) for i in range(5_000)]
    dumped = [f.model_dump() for f in findings]
    for state, items in ((typed, findings), (plain, dumped)):
        with state.fork("w") as branch:
            branch.extend("findings", items)
            branch.set("ids", list(range(10_000)))
        with state.fork("w") as branch:
            branch.append("ids", *range(10_000, 12_000))
    assert typed.get_update() == plain.get_update()
    model = typed.model()
    assert isinstance(model, Report)
    assert model.findings == findings
    assert model.ids == list(range(12_000))
    replica = SharedState(schema=Report, initialize=False)
    replica.apply_update(typed.get_update())
    assert replica.model() == model
