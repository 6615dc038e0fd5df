"""Updates from other replicas that nest too deep are refused before they are applied.

``update_scan.depth_bound`` reads a depth bound from the bytes of a Yjs update;
checked here against documents built with raw pycrdt (nested ``Y.Map``/``Y.Array``
and plain JSON values), the bound is never below the real depth and is exact
for updates that hold everything they write. End to end, a replica accepts an
update exactly when the values it would hold stay within ``MAX_DEPTH``,
whichever of the three checks (size, scan, copy of the document) decides.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pycrdt import Array, Doc, Map

from crdt_state import MAX_DEPTH, InvalidUpdate, SharedState, UnsupportedValue
from crdt_state._document import doc_snapshot
from crdt_state._update_depth import update_depth
from crdt_state._update_scan import depth_bound
from crdt_state.values import nesting

KEYS = ("a", "b", "c")


def build(shape: list[str], leaf: Any, inner: str = "k") -> Any:
    """A chain of containers, outermost first: "map"/"array" are Yjs types, "dict"/"list"
    plain JSON (pycrdt stores those as one opaque value); plain ones only below plain ones."""
    value = leaf
    plain = True
    for kind in reversed(shape):
        if kind == "dict" and plain:
            value = {inner: value}
        elif kind == "list" and plain:
            value = [value]
        elif kind in ("map", "dict"):
            value, plain = Map({inner: value}), False
        else:
            value, plain = Array([value]), False
    return value


shapes = st.lists(st.sampled_from(["map", "array", "dict", "list"]), max_size=6)
leaves = st.sampled_from([1, "s", None])


def content_depth(doc: Doc[Any]) -> int:
    """The deepest value of the document's state, as crdt_state counts depth."""
    snapshot = doc_snapshot(doc)
    return max((1 + nesting(v) for v in snapshot.values()), default=0)


@st.composite
def edits(draw: st.DrawFn) -> list[tuple[str, tuple[str, ...], list[str], Any]]:
    """Random writes: (kind, map path, chain shape, leaf)."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "set", "append"]))
        path = tuple(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)))
        out.append((kind, path, draw(shapes), draw(leaves)))
    return out


def apply_edits(doc: Doc[Any], writes: list[tuple[str, tuple[str, ...], list[str], Any]]) -> None:
    root = doc.get("state", type=Map)
    with doc.transaction():
        for kind, path, shape, leaf in writes:
            node: Any = root
            for key in path[:-1]:
                child = node.get(key) if isinstance(node, Map) else None
                if not isinstance(child, Map):
                    node[key] = Map()
                    child = node[key]
                node = child
            current = node.get(path[-1])
            if kind == "append" and isinstance(current, Array):
                current.append(build(shape, leaf))
            elif kind == "append":
                node[path[-1]] = Array([build(shape, leaf)])
            else:
                node[path[-1]] = build(shape, leaf)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(edits(), min_size=1, max_size=4))
def test_depth_bound_is_never_below_the_real_depth(steps: list[Any]) -> None:
    doc: Doc[Any] = Doc()
    mark = 0
    for i, writes in enumerate(steps):
        before = doc.get_state()
        apply_edits(doc, writes)
        update = doc.get_update(before)
        bound = depth_bound(update, root="state", unknown=mark)
        after = content_depth(doc)
        assert max(mark, bound) >= after
        quick = depth_bound(update, root="state", unknown=mark, limit=MAX_DEPTH)
        assert quick >= bound
        assert after <= max(mark, 1) + len(update) // 2  # the size check's claim
        if i == 0:  # a first update holds everything it writes: the bound is exact
            assert bound == after
        mark = max(mark, after)


def test_depth_bound_ignores_other_roots_and_reads_plain_values() -> None:
    doc: Doc[Any] = Doc()
    other = doc.get("elsewhere", type=Map)
    with doc.transaction():
        other["deep"] = build(["map"] * 80, 1)
    assert depth_bound(doc.get_update(), root="state", unknown=0) == 0
    state = doc.get("state", type=Map)
    with doc.transaction():
        state["plain"] = build(["dict", "list"] * 5, "x")
    assert depth_bound(doc.get_update(), root="state", unknown=0) == 11


@pytest.mark.parametrize("garbage", [b"", b"\x01", b"\x01\x01\x05\x00\x3f", b"\xff" * 12])
def test_depth_bound_refuses_unreadable_bytes(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        depth_bound(garbage, root="state", unknown=0)


@pytest.mark.parametrize("kinds", [("list",), ("dict",), ("map",), ("array",), ("map", "list")])
def test_each_level_of_nesting_costs_an_update_at_least_two_bytes(kinds: tuple[str, ...]) -> None:
    """What the cheapest check relies on: depth <= 1 + size / 2 (here with empty keys too)."""
    for levels in (2, 10, 100):
        update = chain_update(levels, kinds=kinds, key="", inner="")
        assert levels <= 1 + len(update) // 2, (levels, len(update))


def test_update_depth_measures_what_an_update_writes() -> None:
    source: Doc[Any] = Doc()
    root = source.get("state", type=Map)
    with source.transaction():
        root["x"] = build(["map", "array", "dict"], 1)
    target: Doc[Any] = Doc()
    assert update_depth(target, source.get_update()) == 4
    assert doc_snapshot(target) == {}  # measured on a copy
    with pytest.raises(InvalidUpdate):
        update_depth(target, b"\x01\x02garbage")


# -- end to end: a replica refuses exactly the updates that go too deep -------------------
def chain_update(
    levels: int, *, kinds: tuple[str, ...] = ("map",), key: str = "x", inner: str = "k"
) -> bytes:
    """An update storing at ``key`` a value whose depth is exactly ``levels``.

    Yjs types are created one level at a time (pycrdt writes a nested preliminary
    value recursively, and fails a few hundred levels down)."""
    doc: Doc[Any] = Doc()
    shape = [kinds[i % len(kinds)] for i in range(levels - 1)]
    typed = len(shape)  # the plain suffix stays plain; above it everything is a Yjs type
    while typed > 0 and shape[typed - 1] in ("dict", "list"):
        typed -= 1
    with doc.transaction():
        node: Any = doc.get("state", type=Map)
        slot: Any = key
        for kind in shape[:typed]:
            child: Any = Map() if kind in ("map", "dict") else Array()
            if isinstance(node, Map):
                node[slot] = child
                node = node[slot]
            else:
                node.append(child)
                node = node[0]
            slot = inner
        value = build(shape[typed:], 1, inner)  # plain JSON below the typed part
        if isinstance(node, Map):
            node[slot] = value
        else:
            node.append(value)
    return doc.get_update()


@pytest.mark.parametrize("kinds", [("map",), ("array",), ("dict",), ("map", "list")])
@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 480])
def test_replica_refuses_remote_values_past_the_limit(levels: int, kinds: tuple[str, ...]) -> None:
    replica = SharedState()
    replica.commit({"keep": 1}, replica.token, "a")
    before = replica.read()
    update = chain_update(levels, kinds=kinds)
    if levels <= MAX_DEPTH:
        replica.apply_update(update)
        assert replica.get("x") is not None
        return
    with pytest.raises(UnsupportedValue) as info:
        replica.apply_update(update)
    assert info.value.code == "unsupported_value"
    assert info.value.details["limit"] == MAX_DEPTH
    assert info.value.details["depth"] > MAX_DEPTH
    assert replica.read() == before  # nothing applied
    assert doc_snapshot(replica._core.doc) == {"keep": 1}


def test_a_value_hung_below_an_existing_deep_one_is_measured_exactly() -> None:
    """The state already holds a value at the limit: the exact check decides."""
    state = SharedState()
    deep: Any = 1
    for _ in range(MAX_DEPTH - 1):
        deep = {"k": deep}
    state.commit({"deep": deep}, state.token, "a")
    writer = SharedState()
    writer.apply_update(state.get_update())
    base = writer.token
    writer.commit({"other": {"k": 1}}, base, "b")  # shallow: accepted
    state.apply_update(writer.get_update(state.token))
    assert state.get("other") == {"k": 1}
    path = ("deep",) + ("k",) * (MAX_DEPTH - 2)
    doc: Doc[Any] = Doc()
    doc.apply_update(state.get_update())
    node: Any = doc.get("state", type=Map)
    for key in path:
        node = node[key]
    before = doc.get_state()
    node["k"] = Map({"z": 1})  # one level too deep, hung from the existing value
    with pytest.raises(UnsupportedValue):
        state.apply_update(doc.get_update(before))
    assert state.get((*path, "k")) == 1


def test_pending_structs_are_checked_when_their_parent_arrives() -> None:
    """A deep chain sent before the map it hangs from: accepted while pending, then refused
    with the update that would make it land.

    The map comes from one peer, the chain from another (whose clocks start at 0): a peer's
    own structs out of order are refused outright (``test_update_checks``).
    """
    source: Doc[Any] = Doc(client_id=11)
    root = source.get("state", type=Map)
    with source.transaction():
        root["x"] = Map()
    parent = source.get_update()
    writer: Doc[Any] = Doc(client_id=12)
    writer.apply_update(parent)
    state_after_parent = writer.get_state()
    with writer.transaction():
        writer.get("state", type=Map)["x"]["k"] = build(["map"] * (MAX_DEPTH - 1), 1)
    chain = writer.get_update(state_after_parent)
    replica = SharedState()
    replica.apply_update(chain)  # its parent is missing: Yjs keeps it pending
    assert replica.snapshot() == {}
    assert replica._core.held is not None
    with pytest.raises(UnsupportedValue):
        replica.apply_update(parent)
    assert replica.snapshot() == {}
    # a shallow chain in the same situation lands once its parent arrives
    ok = SharedState()
    small: Doc[Any] = Doc(client_id=12)
    small.apply_update(parent)
    mid = small.get_state()
    with small.transaction():
        small.get("state", type=Map)["x"]["k"] = build(["map"] * 3, 1)
    ok.apply_update(small.get_update(mid))
    assert ok._core.held is not None
    ok.apply_update(parent)
    assert ok._core.held is None
    assert ok.get("x") == {"k": {"k": {"k": {"k": 1}}}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    levels=st.integers(MAX_DEPTH - 4, MAX_DEPTH + 4),
    kinds=st.lists(st.sampled_from(["map", "array", "dict", "list"]), min_size=1, max_size=3),
    preload=st.integers(0, MAX_DEPTH),
    padding=st.integers(0, 200),
)
def test_replica_accepts_exactly_the_updates_within_the_limit(
    levels: int, kinds: list[str], preload: int, padding: int
) -> None:
    replica = SharedState()
    if preload:  # a deep mark makes the cheap checks give way to the exact one
        value: Any = 1
        for _ in range(preload - 1):
            value = {"k": value}
        replica.commit({"pre": value}, replica.token, "a")
    doc: Doc[Any] = Doc()
    root = doc.get("state", type=Map)
    with doc.transaction():
        root["pad"] = "p" * padding  # a bigger update skips the size check
        root["x"] = build([kinds[i % len(kinds)] for i in range(levels - 1)], 1)
    truth = content_depth(doc)  # independent: the raw document's own content
    event("too deep" if truth > MAX_DEPTH else "within the limit")
    if truth > MAX_DEPTH:
        with pytest.raises(UnsupportedValue):
            replica.apply_update(doc.get_update())
        assert "x" not in replica
    else:
        replica.apply_update(doc.get_update())
        assert "x" in replica
