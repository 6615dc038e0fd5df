"""VersionVector: encodings, the causal partial order, hashing and printing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Map

from crdt_state import InvalidUpdate, SharedState, VersionVector

clients = st.integers(0, 2**53)
vectors = st.dictionaries(st.sampled_from([1, 2, 3, 2**32 + 5]), st.integers(0, 6), max_size=4).map(
    VersionVector
)
wide_vectors = st.dictionaries(clients, st.integers(0, 2**40), max_size=6).map(VersionVector)


@settings(max_examples=200, deadline=None)
@given(wide_vectors)
def test_state_round_trip(v: VersionVector) -> None:
    assert VersionVector.from_state(v.to_state()) == v
    assert VersionVector.from_text(v.to_text()) == v
    assert re.fullmatch(r"[A-Za-z0-9_-]*", v.to_text())


def test_matches_pycrdt_state_vector() -> None:
    doc_a: Doc[Any] = Doc(client_id=7)
    doc_b: Doc[Any] = Doc(client_id=300)
    for doc, n in ((doc_a, 3), (doc_b, 200)):
        root = doc.get("state", type=Map)
        for i in range(n):
            root[f"k{i}"] = i
    doc_a.apply_update(doc_b.get_update())
    state = doc_a.get_state()
    v = VersionVector.from_state(state)
    assert dict(v) == {7: 3, 300: 200}
    # same entries as pycrdt's encoding (entry order is unspecified in Yjs)
    assert len(v.to_state()) == len(state)
    assert VersionVector.from_state(v.to_state()) == v
    # pycrdt accepts our encoding: an update since v is empty of new content
    doc_c: Doc[Any] = Doc()
    doc_c.apply_update(doc_a.get_update())
    doc_c.apply_update(doc_a.get_update(v.to_state()))
    assert VersionVector.from_state(doc_c.get_state()) == v
    since_b = VersionVector({300: 200})
    doc_d: Doc[Any] = Doc()
    doc_d.apply_update(doc_b.get_update())
    doc_d.apply_update(doc_a.get_update(since_b.to_state()))
    assert VersionVector.from_state(doc_d.get_state()) == v


def test_shared_state_token_is_the_document_state_vector() -> None:
    state = SharedState(client_id=42)
    assert state.token == VersionVector() == VersionVector.from_state(state._core.doc.get_state())
    state.commit({"a": 1, "b": [1, 2]}, state.token, "x")
    assert state.token == VersionVector.from_state(state._core.doc.get_state())
    assert set(state.token) == {42}


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x01", b"\x01\x05", b"\x02\x01\x01", b"\x01\x01\x01\x00", b"\xff" * 11],
)
def test_malformed_state_is_invalid_update(raw: bytes) -> None:
    with pytest.raises(InvalidUpdate) as info:
        VersionVector.from_state(raw)
    assert info.value.code == "invalid_update"


def test_bad_text_is_invalid_update() -> None:
    with pytest.raises(InvalidUpdate):
        VersionVector.from_text("!!!not base64")


@pytest.mark.parametrize("text", ["zzz", "AQ", "A" * 10_000])
def test_base64_that_is_no_state_vector_names_the_text(text: str) -> None:
    with pytest.raises(InvalidUpdate) as info:
        VersionVector.from_text(text)
    assert info.value.code == "invalid_update"
    assert info.value.message.startswith("not a version vector text (")
    assert info.value.details["text"] == text[:100]


def test_bad_entries_rejected() -> None:
    for bad in ({-1: 1}, {1: -1}, {"a": 1}, {1: 1.5}):
        with pytest.raises(ValueError):
            VersionVector(bad)  # type: ignore[arg-type]


def test_zero_clocks_dropped() -> None:
    assert VersionVector({1: 0, 2: 3}) == VersionVector({2: 3})
    assert hash(VersionVector({1: 0, 2: 3})) == hash(VersionVector({2: 3}))
    assert len(VersionVector({1: 0})) == 0
    assert VersionVector({5: 2}).get_clock(9) == 0


@settings(max_examples=300, deadline=None)
@given(vectors, vectors, vectors)
def test_partial_order_laws(a: VersionVector, b: VersionVector, c: VersionVector) -> None:
    assert a <= a and not a < a  # reflexive, irreflexive strict
    if a <= b and b <= a:
        assert a == b  # antisymmetric
    if a <= b and b <= c:
        assert a <= c  # transitive
    assert (a < b) == (a <= b and a != b)
    assert (a >= b) == (b <= a) and (a > b) == (b < a)
    # exactly one of: equal, before, after, concurrent
    assert [a == b, a < b, a > b, a.concurrent(b)].count(True) == 1
    assert a.concurrent(b) == b.concurrent(a)
    # merge is the least upper bound
    m = a.merge(b)
    assert a <= m and b <= m and m == b.merge(a)
    if a <= c and b <= c:
        assert m <= c
    assert a.merge(a) == a
    # the order agrees with per-client clocks
    assert (a <= b) == all(a.get_clock(k) <= b.get_clock(k) for k in set(a) | set(b))


@settings(max_examples=200, deadline=None)
@given(vectors, vectors)
def test_hash_eq_and_str(a: VersionVector, b: VersionVector) -> None:
    rebuilt = VersionVector(dict(reversed(list(a.items()))))
    assert rebuilt == a and hash(rebuilt) == hash(a) and str(rebuilt) == str(a)
    if a == b:
        assert hash(a) == hash(b) and str(a) == str(b)
    else:
        assert a != b
    assert {a: 1}[VersionVector(dict(a))] == 1
    text = str(a)
    assert re.fullmatch(r"\d+@[0-9a-f]{8}", text) and len(text) <= 30
    assert text.split("@")[0] == str(a.total)


def test_str_is_stable_across_runs() -> None:
    # a fixed vector always prints the same (no per-process hash randomisation)
    assert str(VersionVector({1: 2, 3: 4})) == str(VersionVector({3: 4, 1: 2}))
    v = VersionVector({1: 2, 3: 4})
    assert str(v) == "6@" + __import__("hashlib").blake2b(v.to_state(), digest_size=4).hexdigest()


def test_the_strict_decoder_refuses_what_the_lenient_one_reads() -> None:
    twice = bytes([2, 5, 1, 5, 3])  # client 5 listed twice
    assert VersionVector.from_state(twice) == VersionVector({5: 3})
    with pytest.raises(InvalidUpdate) as info:
        VersionVector.from_state(twice, strict=True)
    assert info.value.details["reason"] == "duplicate_client"
    with pytest.raises(InvalidUpdate) as info:
        VersionVector.from_state(bytes([100, 1, 1]), strict=True)
    assert info.value.details["reason"] == "too_many_entries"
    for bad in (b"", bytes([1, 5]), bytes([1, 5, 1, 0])):
        with pytest.raises(InvalidUpdate):
            VersionVector.from_state(bad, strict=True)
    non_canonical = bytes([1, 0x85, 0x00, 1])  # client 5 written in two bytes
    assert VersionVector.from_state(non_canonical) == VersionVector({5: 1})
    with pytest.raises(InvalidUpdate) as info:
        VersionVector.from_state(non_canonical, strict=True)
    assert info.value.details["reason"] == "non_canonical_varuint"
    past_js = bytes([1]) + bytes([0xFF] * 7 + [0x7F]) + bytes([1])  # client 2**56 - 1
    assert VersionVector.from_state(past_js) == VersionVector({2**56 - 1: 1})
    with pytest.raises(InvalidUpdate) as info:
        VersionVector.from_state(past_js, strict=True)
    assert info.value.details["reason"] == "varuint_overflow"
    largest = VersionVector({2**53 - 1: 2**53 - 1})
    assert VersionVector.from_state(largest.to_state(), strict=True) == largest
    token = VersionVector({3: 7, 1: 2})
    assert VersionVector.from_state(token.to_state(), strict=True) == token
    assert VersionVector.from_state(b"\x00", strict=True) == VersionVector()


def _padded_varuint(value: int, extra: int) -> bytes:
    """``value`` as a varuint with ``extra`` superfluous zero groups (longer than needed)."""
    groups = []
    while True:
        groups.append(value & 0x7F)
        value >>= 7
        if not value:
            break
    groups += [0] * extra
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**62),  # at most 9 groups: with a padding group, the lenient limit of 10
    st.integers(0, 2**62),
    st.integers(0, 1),
    st.integers(0, 1),
    st.integers(0, 1),
)
def test_a_one_client_vector_decoded_leniently_encodes_and_decodes_strictly_as_a_fresh_one(
    client: int, clock: int, pad_client: int, pad_clock: int, pad_count: int
) -> None:
    # the lenient decoder keeps canonical one-client bytes as the vector's encoding and
    # hands them to the strict decoder's table: both must give what a fresh vector gives
    state = _padded_varuint(1, pad_count)
    state += _padded_varuint(client, pad_client) + _padded_varuint(clock, pad_clock)
    decoded = VersionVector.from_state(state)
    fresh = VersionVector({client: clock})
    assert decoded == fresh
    assert decoded.to_state() == fresh.to_state()
    assert VersionVector.from_state(decoded.to_state()) == fresh
    try:
        expected: object = VersionVector._strict_decode(state)
    except InvalidUpdate as exc:
        expected = exc.details.get("reason")
    try:
        got: object = VersionVector.from_state(state, strict=True)
    except InvalidUpdate as exc:
        got = exc.details.get("reason")
    assert got == expected
