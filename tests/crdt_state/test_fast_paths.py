"""The merge hot path's shortcuts give the same answers as the plain code paths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt_state import InvalidUpdate, Path, SharedState, StaleBase, VersionVector
from crdt_state._entry import Entry, WriteKind
from crdt_state._entry_reads import Overlap, overlaps


def decode(raw: bytes) -> object:
    try:
        return VersionVector.from_state(raw)
    except InvalidUpdate as exc:
        return ("error", str(exc))


def decode_checked(raw: bytes) -> object:
    try:
        return VersionVector._checked_from_state(raw)
    except InvalidUpdate as exc:
        return ("error", str(exc))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_fast_decoder_agrees_with_checked_decoder_on_any_bytes(raw: bytes) -> None:
    assert decode(raw) == decode_checked(raw)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 2**53), st.integers(0, 2**40), max_size=5),
    st.integers(0, 60),
    st.binary(min_size=1, max_size=3),
)
def test_fast_decoder_on_damaged_state_vectors(
    clocks: dict[int, int], cut: int, extra: bytes
) -> None:
    raw = VersionVector(clocks).to_state()
    for damaged in (raw[:cut], raw + extra):
        assert decode(damaged) == decode_checked(damaged)
    assert VersionVector.from_state(raw) == VersionVector(clocks)
    assert dict(VersionVector.from_state(raw).items()) == {c: k for c, k in clocks.items() if k}


def test_tokens_after_merges_match_a_replica_rebuilt_from_updates() -> None:
    state = SharedState()
    seen = [state.token]
    for i in range(30):
        branch = state.fork(f"agent{i % 3}")
        if i % 7 == 6:
            branch.delete(f"k{i - 1}")  # a delete-only merge ticks the clock
        else:
            branch.set(f"k{i}", {"n": i, "tags": ["a", i]})
        result = branch.merge()
        assert result.token == state.token
        seen.append(state.token)
    replica = SharedState()
    replica.apply_update(state.get_update())
    assert replica.token == state.token
    assert len(set(seen)) == len(seen), "every merge is a new version"


def test_trimmed_history_still_judges_retained_tokens() -> None:
    state = SharedState(history=8)
    first = state.token
    tokens = []
    for i in range(40):
        state.commit({f"k{i % 5}": i}, state.token, "agent")
        tokens.append(state.token)
    with pytest.raises(StaleBase):
        state.validate_base(first)
    for token in tokens[-8:]:
        state.validate_base(token)
    result = state.commit({"k3": "late"}, tokens[-3], "late-agent", default=lambda c: c.incoming)
    assert [c.path for c in result.conflicts] == [("k3",)]
    assert state.get("k3") == "late"


def brute_overlaps(writes: list[Path], entries: list[Entry]) -> dict[Path, Overlap]:
    """The definition, checked write by write."""
    out = {}
    for target in writes:
        related = [
            (entry.agent, path, kind)
            for entry in entries
            for path, kind in entry.writes.items()
            if path[: len(target)] == target or target[: len(path)] == path
        ]
        if related:
            out[target] = Overlap(
                kinds=frozenset(kind for _, _, kind in related),
                exact=all(path == target for _, path, _ in related),
                agent=related[-1][0],
            )
    return out


paths = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["x", "y", "z", None]),
            st.dictionaries(paths, st.sampled_from(["set", "delete", "append"]), max_size=4),
        ),
        max_size=8,
    ),
    st.lists(paths, max_size=4, unique=True),
)
def test_overlaps_matches_its_definition(
    raw_entries: list[tuple[str | None, dict[Path, WriteKind]]], writes: list[Path]
) -> None:
    entries = [
        Entry(seq=i + 1, agent=agent, token=VersionVector(), delta={}, writes=w, undo=[])
        for i, (agent, w) in enumerate(raw_entries)
    ]
    assert overlaps(writes, entries) == brute_overlaps(writes, entries)
