"""The stored forms of paths are kept once encoded: the same text as encoding anew, bounded."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from crdt_state import _sql_params, _sqlite_file
from crdt_state._kept import KEPT_CHARS, KEPT_MAX
from crdt_state._sql_params import paths_json
from crdt_state._sqlite_file import path_key

keys = st.text(min_size=1, max_size=12)
paths = st.lists(keys, min_size=1, max_size=4).map(tuple)


@given(paths)
def test_a_kept_path_key_is_the_encoding_of_the_path(path: tuple[str, ...]) -> None:
    first, again = path_key(path), path_key(tuple(path))
    assert first == again == json.dumps(list(path), separators=(",", ":"))
    assert path_key(list(path)) == first  # type: ignore[arg-type]  # a list: encoded, not kept


@given(st.lists(paths, min_size=1, max_size=4).map(tuple))
def test_a_kept_paths_column_is_the_encoding_of_the_paths(
    written: tuple[tuple[str, ...], ...],
) -> None:
    expected = json.dumps([list(p) for p in written])
    assert paths_json(written) == paths_json(tuple(written)) == expected
    assert paths_json([list(p) for p in written]) == expected  # type: ignore[misc]


def test_long_encodings_are_not_kept_and_the_kept_ones_are_bounded() -> None:
    long = ("k" * (KEPT_CHARS + 1),)
    assert path_key(long) == json.dumps(list(long))
    assert paths_json((long,)) == json.dumps([list(long)])
    assert long not in _sqlite_file._encoded_keys
    assert (long,) not in _sql_params._encoded_paths
    for n in range(KEPT_MAX + 10):
        path_key((f"p{n}",))
        paths_json(((f"p{n}",),))
    assert len(_sqlite_file._encoded_keys) <= KEPT_MAX
    assert len(_sql_params._encoded_paths) <= KEPT_MAX
    assert path_key(("p1",)) == '["p1"]'
