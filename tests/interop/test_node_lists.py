"""Big lists written by crdt-state's hand-built updates, read and edited by stock Yjs (Node).

A state holding a 10,000-item list (written as one Yjs update, see
``crdt_state._document``) is decoded by an unmodified ``yjs`` package in Node: it must see
the same JSON, a ``Y.Array`` whose dict elements are ``Y.Map`` and whose list elements are
``Y.Array``, with one Yjs item per run of plain values. Yjs then appends to the list and
edits a ``Y.Map`` element; that update must merge back into Python.
"""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest
from yjs_node import INTEROP_DIR

from crdt_state import SharedState
from crdt_state.values import normalize

pytestmark = pytest.mark.interop


def mixed(n: int) -> list[Any]:
    kinds = (
        lambda i: i,
        lambda i: 2**53 + 1 + 2 * i,  # a Yjs bigint
        lambda i: i / 7,
        lambda i: f"é😀-{i}",
        lambda i: None,
        lambda i: i % 2 == 0,
        lambda i: {"i": i, "tags": ["t", i, {"deep": [None, True]}]},
        lambda i: [i, ["nested", -i], {}],
        lambda i: 1e300,
    )
    return [kinds[i % len(kinds)](i) for i in range(n)]


def yjs_items(values: list[Any]) -> int:
    """How many Yjs items hold ``values``: one per run of plain values, one per container."""
    count, in_run = 0, False
    for value in values:
        if isinstance(value, (dict, list)):
            count, in_run = count + 1, False
        elif not in_run:
            count, in_run = count + 1, True
    return count


def as_js(value: Any) -> Any:
    """``value`` as it comes back from Yjs through ``JSON.stringify`` (see ydecode.mjs)."""
    if isinstance(value, dict):
        return {k: as_js(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_js(v) for v in value]
    if type(value) is int and float(value) != value:
        return {"$bigint": str(value)}
    return value


def js_equal(a: Any, b: Any) -> bool:
    """Equal as JSON data: numbers compare as doubles, bools and strings strictly."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(js_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(js_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def run_yjs(request: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        ["node", str(INTEROP_DIR / "ydecode.mjs")],
        cwd=INTEROP_DIR,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_yjs_reads_a_big_list_and_its_edits_merge_back() -> None:
    state = SharedState()
    items = mixed(10_000)
    state.commit({"items": items, "other": {"n": 1}}, state.token, "py")
    dict_at = 6
    assert isinstance(items[dict_at], dict)
    pushed = [1, "two", {"three": 3}, [4, [5]], None, 2.5, 2**60]

    answer = run_yjs(
        {
            "update": base64.b64encode(state.get_update()).decode(),
            "key": "items",
            "push": pushed,
            "mapIndex": dict_at,
            "mapKey": "edited",
            "mapValue": True,
        }
    )

    assert js_equal(as_js(state.snapshot()), answer["state"])
    assert answer["layout"] == {
        "array": True,
        "length": 10_000,
        "maps": sum(isinstance(v, dict) for v in items),
        "arrays": sum(isinstance(v, list) for v in items),
        "items": yjs_items(items),
    }
    assert answer["layout"]["items"] < 3_500  # runs of plain values are single items

    result = state.apply_update(base64.b64decode(answer["update"]))
    assert result.applied == (("items",),)
    expected = normalize(items) + normalize(pushed)
    expected[dict_at]["edited"] = True
    got = state.get("items")
    assert js_equal(as_js(got), as_js(expected))
    assert got[-1] == 2**60 and type(got[-1]) is int
    replica = SharedState()
    replica.apply_update(state.get_update())
    assert replica.snapshot() == state.snapshot()
