"""Hypothesis: every valid value of every common field type round-trips typed and
equal; every invalid one is refused with the right path and nothing changes; a
typed state and an untyped one build the same Yjs document for the same data."""

from __future__ import annotations

import string
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Map
from pydantic import BaseModel, create_model

from crdt_state import SchemaError, SharedState, StateSchema

SETTINGS = settings(max_examples=40, deadline=None)


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Point(BaseModel):
    x: int
    y: int = 0
    label: str | None = None


@dataclass(frozen=True)
class Case:
    """A field type, values it accepts, values it refuses (with the first bad loc)."""

    name: str
    annotation: Any
    default: Any
    valid: st.SearchStrategy[Any]
    invalid: st.SearchStrategy[tuple[Any, tuple[Any, ...]]]


WORDS = st.text(alphabet=string.ascii_letters, min_size=1, max_size=8)
NOT_NUMBERS = WORDS.filter(lambda s: s.lower() not in {"inf", "nan", "infinity", "e"})
INTS = st.integers(-(2**53), 2**53)
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)
DATETIMES = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    ),
)
POINTS = st.builds(Point, x=INTS, y=INTS, label=st.none() | st.text(max_size=5))
BAD_POINTS = st.one_of(
    st.fixed_dictionaries({"y": INTS}).map(lambda d: (d, ("x",))),
    st.fixed_dictionaries({"x": NOT_NUMBERS}).map(lambda d: (d, ("x",))),
    st.fixed_dictionaries({"x": INTS, "y": st.lists(INTS, max_size=2)}).map(lambda d: (d, ("y",))),
)


def _bad_list(item_ok: st.SearchStrategy[Any], item_bad: st.SearchStrategy[Any]) -> Any:
    """A list with one bad item at a drawn position; loc is that index."""

    @st.composite
    def build(draw: Any) -> tuple[list[Any], tuple[Any, ...]]:
        items = draw(st.lists(item_ok, max_size=4))
        at = draw(st.integers(0, len(items)))
        items.insert(at, draw(item_bad))
        return items, (at,)

    return build()


def _plain(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, tuple[Any, ...]]]:
    return strategy.map(lambda v: (v, ()))


CASES = [
    Case(
        "int",
        int,
        0,
        INTS,
        _plain(NOT_NUMBERS | FLOATS.filter(lambda f: not f.is_integer()) | st.lists(INTS)),
    ),
    Case("float", float, 0.0, FLOATS | INTS, _plain(NOT_NUMBERS | st.none() | st.lists(FLOATS))),
    Case(
        "bool",
        bool,
        False,
        st.booleans(),
        _plain(st.integers(2, 99) | WORDS.map(lambda w: w + "!")),
    ),
    Case("str", str, "", st.text(max_size=20), _plain(INTS | st.none() | st.lists(WORDS))),
    Case(
        "literal",
        Literal["open", "closed"],
        "open",
        st.sampled_from(["open", "closed"]),
        _plain(WORDS.filter(lambda w: w not in ("open", "closed")) | INTS),
    ),
    Case(
        "enum",
        Color,
        Color.RED,
        st.sampled_from(list(Color)),
        _plain(WORDS.filter(lambda w: w not in ("red", "green")) | INTS),
    ),
    Case(
        "datetime",
        datetime,
        datetime(2000, 1, 1, tzinfo=UTC),
        DATETIMES,
        _plain(NOT_NUMBERS | st.lists(INTS, max_size=2)),
    ),
    Case("optional", int | None, None, st.none() | INTS, _plain(NOT_NUMBERS)),
    Case("list", list[int], [], st.lists(INTS, max_size=5), _bad_list(INTS, NOT_NUMBERS)),
    Case(
        "dict",
        dict[str, int],
        {},
        st.dictionaries(WORDS, INTS, max_size=4),
        st.tuples(WORDS, NOT_NUMBERS).map(lambda kv: ({kv[0]: kv[1]}, (kv[0],))),
    ),
    Case("model", Point, Point(x=0), POINTS, BAD_POINTS),
    Case(
        "list_of_models",
        list[Point],
        [],
        st.lists(POINTS, max_size=3),
        _bad_list(POINTS, BAD_POINTS.map(lambda p: p[0])).map(lambda v: (v[0], v[1])),
    ),
    Case(
        "dict_of_models",
        dict[str, Point],
        {},
        st.dictionaries(WORDS, POINTS, max_size=3),
        st.tuples(WORDS, BAD_POINTS).map(lambda kb: ({kb[0]: kb[1][0]}, (kb[0], *kb[1][1]))),
    ),
]


def model_for(case: Case) -> type[BaseModel]:
    model: type[BaseModel] = create_model(
        f"Holds_{case.name}", value=(case.annotation, case.default), other=(int, 0)
    )
    return model


MODELS = {case.name: model_for(case) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_valid_values_round_trip_typed_and_equal(case: Case, data: st.DataObject) -> None:
    model: type[Any] = MODELS[case.name]  # made by create_model: its fields are unknown to mypy
    state = SharedState(schema=model)
    value = data.draw(case.valid, label="value")
    with state.fork("agent") as branch:
        branch.set("value", value)
    read = state.model().value
    assert read == value
    assert type(read) is type(value) or (isinstance(value, int) and isinstance(read, float))
    # a second replica reading the same document agrees
    replica = SharedState(schema=model, initialize=False)
    replica.apply_update(state.get_update())
    assert replica.model().value == value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_invalid_values_are_refused_at_their_path(case: Case, data: st.DataObject) -> None:
    state = SharedState(schema=MODELS[case.name])
    before = state.read()
    value, loc = data.draw(case.invalid, label="invalid")
    branch = state.fork("agent")
    branch.set("other", 1)
    with pytest.raises(SchemaError) as info:
        branch.set("value", value)
    locs = [e["loc"] for e in info.value.errors]
    assert all(where[0] == "value" for where in locs)
    assert any(where[: 1 + len(loc)] == ("value", *loc) for where in locs), locs
    assert all({"type", "loc", "msg", "input"} <= set(e) for e in info.value.errors)
    assert branch.changes() == (("other",),)  # the failed write left no trace
    with pytest.raises(SchemaError):
        branch.update({"value": value, "other": 2})
    assert branch.get("other") == 1
    branch.discard()
    assert state.read() == before


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_invalid_values_are_refused_from_remote_replicas(case: Case, data: st.DataObject) -> None:
    typed = SharedState(schema=MODELS[case.name])
    value, _ = data.draw(case.invalid, label="invalid")
    plain = SharedState()
    plain.apply_update(typed.get_update())
    try:
        with plain.fork("rogue") as branch:
            branch.set("value", value)
    except Exception:  # not storable at all (not JSON data): nothing to send
        return
    before = typed.read()
    with pytest.raises(SchemaError) as info:
        typed.apply_update(plain.get_update())
    assert info.value.errors[0]["loc"][0] == "value"
    assert typed.read() == before


def _content(state: SharedState) -> Any:
    doc: Doc[Any] = Doc()
    doc.apply_update(state.get_update())
    return doc.get("state", type=Map).to_py()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_typed_and_untyped_states_build_the_same_document(case: Case, data: st.DataObject) -> None:
    model = MODELS[case.name]
    values = data.draw(st.lists(case.valid, min_size=1, max_size=3), label="values")
    typed = SharedState(schema=model, client_id=77)
    plain = SharedState(client_id=77)
    schema = StateSchema(model)
    with plain.fork("schema") as branch:
        branch.update(schema.defaults())
    for value in values:
        with typed.fork("agent") as branch:
            branch.set("value", value)
        with plain.fork("agent") as branch:
            branch.set("value", schema.prepare(("value",), value))
    assert _content(typed) == _content(plain)
    assert typed.get_update() == plain.get_update()
