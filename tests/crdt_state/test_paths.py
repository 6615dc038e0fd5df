"""Paths and patterns: parsing, errors, ``*`` and ``**``, most specific wins."""

from __future__ import annotations

import gc
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt_state import Conflict, InvalidPath, Pattern, SharedState, format_path, parse_path
from crdt_state.paths import is_prefix, most_specific, related
from crdt_state.resolvers import PolicyTable

keys = st.text(min_size=1, max_size=4)
path_tuples = st.lists(keys, min_size=1, max_size=4).map(tuple)


def test_parse_forms() -> None:
    assert parse_path("customer.tier") == ("customer", "tier")
    assert parse_path("x") == ("x",)
    assert parse_path(("customer", "a.b")) == ("customer", "a.b")
    assert parse_path(["a", "b"]) == ("a", "b")


@pytest.mark.parametrize(
    "bad", ["", "a..b", ".a", "a.", (), [], ("a", ""), ("a", 1), (None,), 3, None, b"a.b", {"a": 1}]
)
def test_parse_errors(bad: object) -> None:
    with pytest.raises(InvalidPath) as info:
        parse_path(bad)
    error = info.value
    assert error.code == "invalid_path"
    assert isinstance(error, KeyError)
    assert "value" in error.details
    assert str(error).startswith("[invalid_path]")


@settings(max_examples=200, deadline=None)
@given(path_tuples)
def test_format_parse_round_trip(path: tuple[str, ...]) -> None:
    text = format_path(path)
    if all("." not in k for k in path):
        assert parse_path(text) == path
    else:
        assert text == repr(path)
    assert parse_path(path) == path


@settings(max_examples=200, deadline=None)
@given(path_tuples, path_tuples)
def test_related_and_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    assert related(a, b) == (is_prefix(a, b) or is_prefix(b, a))
    assert related(a, b) == related(b, a)
    assert is_prefix(a, a + b)
    assert related(a, a + b)


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("a.b", ("a", "b"), True),
        ("a.b", ("a",), False),
        ("a.b", ("a", "b", "c"), False),
        ("a.*", ("a", "b"), True),
        ("a.*", ("a",), False),
        ("a.*", ("a", "b", "c"), False),
        ("*.b", ("x", "b"), True),
        ("*", ("x",), True),
        ("*", ("x", "y"), False),
        ("**", ("x",), True),
        ("**", ("x", "y", "z"), True),
        ("a.**", ("a",), True),  # ** matches zero keys
        ("a.**", ("a", "b", "c"), True),
        ("a.**", ("b", "a"), False),
        ("**.tier", ("tier",), True),
        ("**.tier", ("customer", "x", "tier"), True),
        ("**.tier", ("customer", "tier", "x"), False),
        ("a.**.z", ("a", "z"), True),
        ("a.**.z", ("a", "b", "c", "z"), True),
        ("a.**.z", ("a", "b", "c"), False),
        ("*.**", ("a",), True),
        (("a.b", "*"), ("a.b", "c"), True),
    ],
)
def test_pattern_matching(pattern: object, path: tuple[str, ...], matches: bool) -> None:
    assert Pattern.parse(pattern).matches(path) is matches


def test_pattern_errors() -> None:
    with pytest.raises(InvalidPath):
        Pattern.parse("a.**.**")
    with pytest.raises(InvalidPath):
        Pattern.parse("")
    assert Pattern.parse(Pattern.parse("a.*")) == Pattern.parse("a.*")
    assert str(Pattern.parse("a.*")) == "a.*"


def test_most_specific_wins() -> None:
    names = ["**", "*.tier", "customer.*", "customer.tier", "customer.**"]
    patterns = [Pattern.parse(p) for p in names]
    assert most_specific(patterns, ("customer", "tier")) == Pattern.parse("customer.tier")
    assert most_specific(patterns, ("customer", "name")) == Pattern.parse("customer.*")
    assert most_specific(patterns, ("customer", "a", "b")) == Pattern.parse("customer.**")
    assert most_specific(patterns, ("order", "tier")) == Pattern.parse("*.tier")
    assert most_specific(patterns, ("x", "y", "z")) == Pattern.parse("**")
    assert most_specific(patterns[1:2], ("x",)) is None


@settings(max_examples=200, deadline=None)
@given(st.permutations(["**", "a.**", "a.*", "*.b", "a.b", "*.*"]))
def test_most_specific_independent_of_order(order: list[str]) -> None:
    patterns = [Pattern.parse(p) for p in order]
    assert most_specific(patterns, ("a", "b")) == Pattern.parse("a.b")
    assert most_specific(patterns, ("a", "c")) == Pattern.parse("a.*")
    assert most_specific(patterns, ("c", "b")) == Pattern.parse("*.b")
    assert most_specific(patterns, ("a", "c", "d")) == Pattern.parse("a.**")
    assert most_specific(patterns, ("c", "d")) == Pattern.parse("*.*")
    assert most_specific(patterns, ("c",)) == Pattern.parse("**")


def _conflict(path: tuple[str, ...]) -> Conflict:
    return Conflict(path, 0, 1, 2, "x", "y")


def test_policy_table_routes_by_most_specific_pattern() -> None:
    table = PolicyTable(
        {"**": lambda c: "deep", "scores.*": lambda c: "star", "scores.final": lambda c: "exact"},
        default=lambda c: "default",
    )
    assert table.resolve(_conflict(("scores", "final")))[0].resolution == "exact"
    assert table.resolve(_conflict(("scores", "q1")))[0].resolution == "star"
    assert table.resolve(_conflict(("other",)))[0].resolution == "deep"
    overlay = table.overlay({"scores.*": lambda c: "merge-time"})
    assert overlay.resolve(_conflict(("scores", "q1")))[0].resolution == "merge-time"
    # a less specific merge-time rule still beats the state's rules
    assert overlay.resolve(_conflict(("scores", "final")))[0].resolution == "merge-time"
    bare = PolicyTable({}, default=lambda c: "default")
    assert bare.resolve(_conflict(("x",)))[0].resolution == "default"


def test_a_cached_default_overlay_routes_as_the_table_and_holds_no_cycle() -> None:
    outer = PolicyTable({"**": lambda c: "outer"})
    table = PolicyTable({"scores.*": lambda c: "star"}, default=lambda c: "default", parent=outer)
    default = lambda c: "new default"  # noqa: E731
    overlay = table.overlay(None, default)
    assert table.overlay(None, default) is overlay  # cached
    assert overlay.resolve(_conflict(("scores", "q1")))[0].resolution == "star"
    assert overlay.resolve(_conflict(("other",)))[0].resolution == "outer"
    assert overlay.has_rule(("scores", "q1")) and overlay.has_rule(("other",))
    bare = PolicyTable(None, default=lambda c: "default").overlay(None, default)
    assert bare.resolve(_conflict(("x",)))[0].resolution == "new default"
    # the table is freed as its last reference goes, no collection needed
    alive = weakref.ref(table)
    gc.disable()
    try:
        del table, overlay
        assert alive() is None, "the cached overlay kept its table in a cycle"
    finally:
        gc.enable()


def test_state_resolvers_by_pattern_end_to_end() -> None:
    state = SharedState(resolvers={"n.*": "star", "n.exact": "exact", "**": "any"})
    state.commit({"n": {"exact": 0, "other": 0}, "top": 0}, state.token, "init")
    branch = state.fork("b")
    for path in ("n.exact", "n.other", "top"):
        branch.set(path, 1)
    state.commit({"n.exact": 2, "n.other": 2, "top": 2}, state.token, "rival")
    result = branch.merge()
    assert {c.path: c.resolution for c in result.conflicts} == {
        ("n", "exact"): "exact",
        ("n", "other"): "star",
        ("top",): "any",
    }
    assert state.snapshot() == {"n": {"exact": "exact", "other": "star"}, "top": "any"}
