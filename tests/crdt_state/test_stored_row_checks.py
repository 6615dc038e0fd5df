"""Stored log rows: the one-pass check of usual rows reads exactly what the column checks read.

``_stored_rows.stored_change`` takes rows whose columns have the usual types in one pass
and sends every other row through the column-by-column checks. Both must agree: the same
``StoredChange`` for a good row, the same ``StorageError`` (naming table, column, row)
for a damaged one, whatever path the row takes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt_state import StorageError
from crdt_state._stored_rows import _checked_change, stored_change
from crdt_state.version import VersionVector

_TOKEN = VersionVector({7: 3, 12: 1}).to_state()

keys = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans(), st.none())
path_json = st.one_of(
    st.lists(st.lists(keys, max_size=3), max_size=3).map(json.dumps),
    st.sampled_from(["", "{", "[1]", '{"a": 1}', "[[1.5]]", "null", '[["a"], 2]']),
)
columns = st.tuples(
    st.one_of(st.integers(0, 10**6), st.booleans(), st.just("7"), st.floats(0, 9)),
    st.one_of(st.just(_TOKEN), st.binary(max_size=6), st.just("x"), st.just(bytearray(_TOKEN))),
    st.one_of(st.binary(max_size=8), st.just(memoryview(b"\x00\x00")), st.just("u")),
    st.one_of(st.none(), st.text(max_size=5), st.just(3)),
    st.one_of(st.sampled_from(["local", "remote"]), st.none(), st.just(b"o")),
    st.one_of(st.floats(allow_nan=True), st.integers(0, 2**40), st.just("1.0"), st.none()),
    st.one_of(path_json, st.none(), st.just(b"[]")),
)


def _read(read: Any, row: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return "ok", read(row, "stored state")
    except StorageError as exc:
        return "damaged", (str(exc), exc.details)


@settings(max_examples=400, deadline=None)
@given(columns)
def test_one_pass_and_column_checks_agree(row: tuple[Any, ...]) -> None:
    assert _read(stored_change, row) == _read(_checked_change, row)


def test_a_usual_row_is_read_whole() -> None:
    row = (5, _TOKEN, b"\x01\x02", "agent-1", "local", 1.5, '[["a"], ["b", 0]]')
    change = stored_change(row)
    assert (change.seq, change.update, change.agent, change.origin, change.time) == (
        5,
        b"\x01\x02",
        "agent-1",
        "local",
        1.5,
    )
    assert change.token == VersionVector({7: 3, 12: 1})
    # a stored path may hold list indexes, which journal.Path (tuple[str, ...]) does not say
    expected: tuple[tuple[object, ...], ...] = (("a",), ("b", 0))
    assert change.paths == expected


@pytest.mark.parametrize(
    ("column", "index", "value"),
    [
        ("token", 1, b"\x05"),
        ("paths", 6, '[["a"], 2]'),
        ("paths", 6, "{"),
        ("time", 5, math.inf),
        ("agent", 3, 3),
    ],
)
def test_a_damaged_column_is_named(column: str, index: int, value: Any) -> None:
    row: list[Any] = [5, _TOKEN, b"\x01", "agent-1", "local", 1.5, '[["a"]]']
    row[index] = value
    with pytest.raises(StorageError) as caught:
        stored_change(tuple(row), "stored state")
    assert caught.value.details == {"table": "log", "column": column, "row": "5"}
    assert "stored state is damaged" in str(caught.value)
