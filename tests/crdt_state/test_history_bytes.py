"""The change log is bounded in bytes as well as in entries.

A writer that overwrites one large value again and again used to make the state keep
one copy of every overwritten value (the log's undo records) up to ``history`` entries:
10,000 merges of 1 MiB held 10 GB. ``history_bytes`` bounds what the retained entries
hold; past it the oldest entries go, and a fork base older than what is retained is
refused with ``StaleBase`` (a caller told, never a lost update).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crdt_state import ConflictError, SharedState, StaleBase
from crdt_state._sizes import oldest_to_drop, undo_bytes, value_bytes

MIB = 2**20


def big(i: int, size: int) -> str:
    return str(i % 10) * size


def test_overwriting_a_large_value_keeps_the_history_within_its_byte_budget() -> None:
    state = SharedState(history_bytes=4 * MIB)
    tracemalloc.start()
    try:
        for i in range(120):
            state.commit({"doc": big(i, 256 * 1024)}, state.token, "writer")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    log = state._core.log
    assert log.retained_bytes <= 4 * MIB
    assert 0 < len(list(log.entries())) < 20  # ~12 entries of 256 KiB fit, not 120
    # 120 overwritten values of 256 KiB would be 30 MiB; what the budget keeps is ~4
    assert held < 12 * MIB, held
    assert state.get("doc") == big(119, 256 * 1024)


def test_small_values_follow_the_entry_limit_follow_the_entry_limit() -> None:
    state = SharedState(history=50)
    for i in range(200):
        state.commit({f"k{i % 7}": i}, state.token, "writer")
    entries = list(state._core.log.entries())
    assert 50 <= len(entries) <= 62  # trimmed to 50 once over 50 + 50 // 4
    assert state._core.log.retained_bytes < 64 * 1024


def test_a_base_older_than_the_retained_history_is_refused_then_a_retry_lands() -> None:
    state = SharedState(history_bytes=MIB)
    old = state.fork("slow")
    old.set("mine", "answer")
    for i in range(20):
        state.commit({"doc": big(i, 200 * 1024)}, state.token, "fast")
    with pytest.raises(StaleBase):
        old.merge()
    assert "mine" not in state.snapshot()

    def step(branch: object) -> None:
        branch.set("mine", "answer")  # type: ignore[attr-defined]

    result = state.transact(step, agent="slow")
    assert result.applied
    assert state.get("mine") == "answer"
    assert state.get("doc") == big(19, 200 * 1024)


def test_a_base_inside_the_retained_history_is_still_judged_against_the_fork_base() -> None:
    state = SharedState(history_bytes=MIB)
    state.commit({"doc": "small", "n": 0}, state.token, "setup")
    branch = state.fork("late")
    branch.set("n", 1)
    state.commit({"n": 2}, state.token, "other")
    state.commit({"doc": big(1, 100 * 1024)}, state.token, "other")
    with pytest.raises(ConflictError) as raised:
        branch.merge()
    assert [c.path for c in raised.value.conflicts] == [("n",)]
    assert state.get("n") == 2


def test_a_single_entry_over_the_budget_is_kept_until_a_newer_one_comes() -> None:
    state = SharedState(history_bytes=64 * 1024)
    state.commit({"doc": big(0, 128 * 1024)}, state.token, "w")
    state.commit({"doc": big(1, 128 * 1024)}, state.token, "w")  # undo holds 128 KiB
    state.commit({"doc": big(2, 128 * 1024)}, state.token, "w")
    entries = list(state._core.log.entries())
    assert len(entries) == 1  # the newest stays, whatever its size
    assert state.get("doc") == big(2, 128 * 1024)


def test_the_byte_budget_is_kept_when_a_stored_state_is_reopened(tmp_path: Path) -> None:
    file = tmp_path / "room.db"
    state = SharedState.open(file, history_bytes=2 * MIB)
    for i in range(30):
        state.commit({"doc": big(i, 128 * 1024)}, state.token, "w")
    state.close()
    again = SharedState.open(file, history_bytes=2 * MIB)
    try:
        assert again._core.log.limit_bytes == 2 * MIB
        assert again._core.log.retained_bytes <= 2 * MIB
        assert again.get("doc") == big(29, 128 * 1024)
    finally:
        again.close()


@pytest.mark.parametrize("name", ["history", "history_bytes"])
@pytest.mark.parametrize("bad", [0, -1])
def test_a_bound_below_one_is_refused(name: str, bad: int) -> None:
    options: dict[str, Any] = {name: bad}
    with pytest.raises(ValueError, match=f"{name} must be at least 1, not {bad}"):
        SharedState(**options)


@pytest.mark.parametrize("name", ["history", "history_bytes"])
@pytest.mark.parametrize("bad", ["1MB", 1.5, True, None])
def test_a_bound_that_is_not_an_int_is_refused_by_name(name: str, bad: object) -> None:
    options: dict[str, Any] = {name: bad}  # wrong types on purpose
    with pytest.raises(TypeError, match=f"{name} must be an int, not {type(bad).__name__}"):
        SharedState(**options)


def test_value_bytes_counts_strings_by_length_and_walks_deep_values_without_recursion() -> None:
    assert value_bytes("x" * 1000) > 1000
    assert value_bytes(5) == value_bytes(None)
    nested: list[object] = []
    top = nested
    for _ in range(100_000):  # far deeper than the interpreter's recursion limit
        inner: list[object] = []
        nested.append(inner)
        nested = inner
    assert value_bytes(top) >= 100_000
    assert undo_bytes([(("a",), {"k": "v" * 500})]) > 500


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=40),
    over=st.integers(min_value=-5, max_value=40),
    limit=st.integers(min_value=1, max_value=5000),
)
def test_oldest_to_drop_drops_the_fewest_that_meet_both_limits(
    sizes: list[int], over: int, limit: int
) -> None:
    drop = oldest_to_drop(sizes, over, limit)
    kept = sizes[drop:]
    least = min(max(0, over), len(sizes) - 1)
    assert kept, "the newest entry is always kept"
    assert drop >= least
    if sum(sizes) > limit:
        assert sum(kept) <= limit * 3 // 4 or len(kept) == 1
        if drop > least:  # dropping one fewer would not have been enough
            assert sum(sizes[drop - 1 :]) > limit * 3 // 4
    else:
        assert drop == least
