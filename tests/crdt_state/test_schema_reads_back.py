"""A typed write is stored only if its stored JSON form reads back as what was written.

Found as a user (round 3): a ``dict[str, Any]`` field given a ``datetime``, a ``Decimal``,
a ``UUID`` or a ``set`` stored their JSON text silently (``model()`` gave back ``str`` and
``list``), while a plain ``Any`` field refused the same values; non-UTF-8 ``bytes`` raised a
bare ``UnicodeDecodeError``.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from crdt_state import SharedState, UnsupportedValue
from crdt_state._schema_errors import first_difference
from crdt_state._schema_slots import holds_any

WHEN = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


class Colour(enum.StrEnum):
    RED = "red"


class Inner(BaseModel):
    extra: Any = None


class Doc(BaseModel):
    meta: dict[str, Any] = {}
    log: list[Any] = []
    times: dict[str, dt.datetime] = {}
    inner: Inner = Inner()
    raw: bytes | None = None


@pytest.mark.parametrize(
    ("value", "where", "kind"),
    [
        ({"when": WHEN}, ("when",), "datetime"),
        ({"price": Decimal("1.10")}, ("price",), "Decimal"),
        ({"id": uuid.UUID(int=1)}, ("id",), "UUID"),
        ({"tags": {"x"}}, ("tags",), "set"),
        ({"deep": {"er": [1, {"when": WHEN}]}}, ("deep", "er", 1, "when"), "datetime"),
    ],
)
def test_a_value_json_would_change_is_refused_where_it_sits(
    value: dict[str, Any], where: tuple[Any, ...], kind: str
) -> None:
    state = SharedState(schema=Doc)
    with state.fork("w") as branch:
        branch.set("meta", {"kept": 1})
    with state.fork("w") as branch:
        with pytest.raises(UnsupportedValue) as info:
            branch.set("meta", value)
        assert info.value.path == ("meta",)
        assert info.value.details["at"] == list(where)
        assert info.value.details["type"] == kind
        assert kind in str(info.value) and "read back as" in str(info.value)
    assert state.model().meta == {"kept": 1}  # nothing written


def test_lists_of_any_and_nested_any_fields_are_checked_too() -> None:
    state = SharedState(schema=Doc)
    with state.fork("w") as branch:
        with pytest.raises(UnsupportedValue):
            branch.append("log", WHEN)
        with pytest.raises(UnsupportedValue):
            branch.set("inner", Inner(extra=WHEN))
        with pytest.raises(UnsupportedValue):
            branch.update({"meta.when": WHEN})
    assert state.snapshot() == SharedState(schema=Doc).snapshot()  # nothing written


def test_what_reads_back_as_written_is_stored() -> None:
    """Tuples as lists, whole floats as ints, a str enum as its value, typed datetimes."""
    state = SharedState(schema=Doc)
    with state.fork("w") as branch:
        branch.set("meta", {"pair": (1, "a"), "ratio": 3.0, "colour": Colour.RED, "n": None})
        branch.append("log", {"ok": [True, 0.5]})
        branch.set("times", {"start": WHEN})
        branch.set("inner", Inner(extra={"x": [1, 2]}))
        branch.set("raw", b"plain text")
    model = state.model()
    assert model.meta == {"pair": [1, "a"], "ratio": 3, "colour": "red", "n": None}
    assert model.times == {"start": WHEN}
    assert model.inner.extra == {"x": [1, 2]}
    assert model.raw == b"plain text"


def test_bytes_that_are_not_utf8_get_a_typed_error() -> None:
    state = SharedState(schema=Doc)
    with state.fork("w") as branch, pytest.raises(UnsupportedValue) as info:
        branch.set("raw", b"\xff\x00\xfe")
    assert info.value.path == ("raw",)
    assert info.value.code == "unsupported_value"
    assert "utf-8" in str(info.value)


class Node(BaseModel):
    children: list[Node] = []
    name: str = ""


class Loose(BaseModel):
    children: list[Loose] = []
    anything: dict = {}  # type: ignore[type-arg]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Any, True),
        (int, False),
        (dict[str, Any] | None, True),
        (dict[str, list[int]], False),
        (list, True),
        (tuple[int, ...], False),
        (Inner, True),
        (Node, False),  # recursive, fully typed: the walk ends
        (Loose, True),
        (Doc, True),
    ],
)
def test_which_annotations_hold_untyped_values(annotation: Any, expected: bool) -> None:
    assert holds_any(annotation) is expected


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_json)
def test_plain_data_never_differs_from_itself(value: Any) -> None:
    assert first_difference(value, value) is None


@given(_json)
def test_a_datetime_anywhere_differs_from_its_text(value: Any) -> None:
    written = {"v": value, "when": WHEN}
    stored = {"v": value, "when": WHEN.isoformat()}
    assert first_difference(written, stored) == (("when",), WHEN, WHEN.isoformat())


def test_bools_are_not_numbers_and_none_is_only_none() -> None:
    assert first_difference(True, 1) == ((), True, 1)
    assert first_difference(None, 0) == ((), None, 0)
    assert first_difference([1, 2], [1]) == ((), [1, 2], [1])
    assert first_difference({"a": 1}, {"b": 1}) is not None
