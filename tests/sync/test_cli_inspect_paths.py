"""``crdt-state inspect`` paths: a key holding a dot is named as a JSON array, and every
path the CLI prints is one it accepts back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inspect_runs import run, run_json

from crdt_state import SharedState, resolvers
from sync.cli_paths import cli_path, path_text

URLS = '["urls","example.com"]'


@pytest.fixture
def dotted_file(tmp_path: Path) -> Path:
    """A key with a dot (``urls`` / ``example.com``) written twice at once, and a plain one."""
    file = tmp_path / "dots.sqlite"
    lww = {("urls", "example.com"): resolvers.last_writer_wins}
    with SharedState.open(file, resolvers=lww) as state:
        state.commit({("urls", "example.com"): 1, "plan.owner": "ann"}, state.token, "alice")
        base = state.token
        state.commit({("urls", "example.com"): 2}, base, "alice")
        state.commit({("urls", "example.com"): 3}, base, "bob")
    return file


def test_a_key_with_a_dot_is_named_as_a_json_array(
    dotted_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = str(dotted_file)
    assert run_json(capsys, file, "show", URLS)["value"] == 3
    assert run_json(capsys, file, "show", '["urls", "example.com"]')["value"] == 3  # spaces
    code, out, _ = run(capsys, file, "blame", URLS)
    assert code == 0 and "last written by bob" in out and f"wrote {URLS}" in out
    assert out.startswith(f"{URLS}: ")
    assert [e["seq"] for e in run_json(capsys, file, "history", "--path", URLS)] == [1, 2, 3]
    (conflict,) = run_json(capsys, file, "conflicts", "--path", URLS)
    assert conflict["path"] == ["urls", "example.com"]
    # the dotted form stays what it was: keys without dots
    assert run_json(capsys, file, "show", "plan.owner")["value"] == "ann"
    assert run_json(capsys, file, "show", '["plan","owner"]')["value"] == "ann"
    code, _, err = run(capsys, file, "show", "urls.example.com")
    assert code == 2 and "nothing at path" in err and "a JSON array of keys" in err


def test_printed_paths_are_accepted_back(
    dotted_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = str(dotted_file)
    code, out, _ = run(capsys, file, "history")
    assert code == 0 and "('urls'" not in out
    first = out.splitlines()[2]  # seq 1 wrote both paths
    assert URLS in first and "plan.owner" in first
    code, out, _ = run(capsys, file, "conflicts")
    assert code == 0 and URLS in out.splitlines()[2]
    assert run_json(capsys, file, "show", URLS)["value"] == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('["a", 0]', ("a", "0")),  # an int key is the dotted form's digits: "a.0"
        ("a.0", ("a", "0")),
        ('["a.b"]', ("a.b",)),
        ('["é", "x y"]', ("é", "x y")),
        ("plain", ("plain",)),
    ],
)
def test_cli_paths(text: str, expected: tuple[str, ...]) -> None:
    assert cli_path(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[urls", "not JSON"),
        ("[]", "at least one key"),
        ('["a", true]', "strings and integers"),
        ('["a", 1.5]', "strings and integers"),
        ('["a", null]', "strings and integers"),
        ('[["a"]]', "strings and integers"),
        ('["a", ""]', "must not be empty"),
        ('["a", -1]', "strings and integers"),
    ],
)
def test_bad_cli_paths_are_one_line_exit_2(
    text: str, why: str, dotted_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, str(dotted_file), "show", text)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("crdt-state inspect: ") and why in err


keys = st.text(st.characters(codec="utf-8"), min_size=1, max_size=5)  # no lone surrogate


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, min_size=1, max_size=4).map(tuple))
def test_path_text_round_trips(path: tuple[str, ...]) -> None:
    text = path_text(path)
    assert cli_path(text) == path
    if all("." not in k for k in path) and not path[0].startswith("["):
        assert text == ".".join(path)  # dotted whenever that reads back the same
    else:
        assert json.loads(text) == list(path)
