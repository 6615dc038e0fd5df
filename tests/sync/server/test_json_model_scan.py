"""The hub's reading of which Yjs content an update carries (sync.server._json_model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pycrdt import Array, Doc, Map, Text, XmlFragment

from crdt_state import SharedState
from sync.server._json_model import non_json_content


def _update(make: Callable[[], Any]) -> bytes:
    doc: Doc[Any] = Doc()
    state = doc.get("state", type=Map)
    state["k"] = make()
    state["other"] = -5
    return doc.get_update()


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (lambda: Text("hi"), "a Y.Text"),
        (XmlFragment, "a Y.XmlFragment"),
        (lambda: Map({"deep": Array([Map({"t": Text("x")})])}), "a Y.Text"),
    ],
)
def test_non_json_types_are_found(make: Callable[[], Any], found: str) -> None:
    assert non_json_content(_update(make)) == found


@pytest.mark.parametrize(
    "make",
    [
        lambda: {"a": [1, 2.5, -3, {"b": None, "c": True, "s": "x" * 300}], "n": 10**12},
        lambda: Map({"a": Array([1, "x", Map({"z": 1})])}),
        lambda: "plain",
        lambda: b"\x01\x02",
    ],
)
def test_json_content_passes(make: Callable[[], Any]) -> None:
    update = _update(make)
    assert non_json_content(update) is None
    state = SharedState()
    state.apply_update(update)  # what passes is plain JSON in the state
    assert "k" in state.snapshot()


def test_text_under_another_root_is_found() -> None:
    doc: Doc[Any] = Doc()
    text = doc.get("notes", type=Text)
    text += "abc"
    assert non_json_content(doc.get_update()) == "text content (Y.Text characters)"


def test_unparsable_bytes_are_left_to_the_document() -> None:
    assert non_json_content(b"\x01\x05") is None
    assert non_json_content(b"") is None
