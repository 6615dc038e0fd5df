"""``crdt-state inspect`` given something it cannot use: one line naming what it wants,
exit status 2, never a traceback; and every option says what it takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from inspect_runs import run

from crdt_state import SharedState
from sync.cli import main


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    file = tmp_path / "state.sqlite"
    with SharedState.open(file) as state:
        state.commit({"plan": {"owner": "ann"}}, state.token, "alice")
    return file


def one_line(err: str) -> str:
    assert len(err.splitlines()) == 1 and err.startswith("crdt-state inspect: "), err
    return err


@pytest.mark.parametrize("where", ["a directory", "in a missing directory"])
def test_export_to_a_place_it_cannot_write_is_one_line(
    where: str, state_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out" if where == "a directory" else tmp_path / "missing" / "x.json"
    if where == "a directory":
        out.mkdir()
    code, stdout, err = run(capsys, str(state_file), "export", "-o", str(out))
    assert code == 2 and stdout == ""
    assert f"cannot write {out}" in one_line(err)
    assert ("is a directory" if where == "a directory" else "no directory") in err
    assert not (tmp_path / "missing").exists()


def test_at_names_the_token_form_it_takes(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SharedState.open(state_file, read_only=True) as state:
        token = state.token
    code, _, err = run(capsys, str(state_file), "at", str(token))  # "1@8f0e...": for logs
    one_line(err)
    assert code == 2 and "invalid_update" not in err
    assert f"{str(token)!r} is a token's short display form" in err
    assert "VersionVector.to_text()" in err and "seq number" in err
    assert token.to_text() in err  # an example of the form it takes, from this file
    code, _, err = run(capsys, str(state_file), "at", "not!a!token")
    one_line(err)
    assert code == 2 and "not a token: 'not!a!token'" in err and "[bad_token]" in err
    assert "VersionVector.to_text()" in err and "invalid_update" not in err


def test_a_directory_target_suggests_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path), "show")
    assert code == 2 and f"{tmp_path} is a directory" in one_line(err)
    assert f"--db {tmp_path} ROOM" in err


def help_entries(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, str]:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    options = capsys.readouterr().out.split("options:", 1)[1]
    entries = (" ".join(e.split()) for e in re.split(r"\n  (?=-)", options)[1:])
    return {e.split()[0].rstrip(","): e for e in entries}


@pytest.mark.parametrize("action", ["show", "history", "blame", "conflicts", "at", "export"])
def test_every_inspect_option_has_help(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    for name, entry in help_entries(capsys, "inspect", "f", action).items():
        words = [w for w in entry.split()[1:] if not w.isupper()]  # less the metavar
        assert words, f"inspect {action} {name} has no help"


def test_history_help_says_what_each_option_takes(capsys: pytest.CaptureFixture[str]) -> None:
    entries = help_entries(capsys, "inspect", "f", "history")
    assert "JSON array" in entries["--path"] and "agent" in entries["--agent"]
    assert all(form in entries["--since"] for form in ("10m", "2h", "unix time", "ISO"))
    assert "newest" in entries["--limit"]


@pytest.mark.parametrize("action", ["show", "blame"])
def test_a_path_argument_says_how_to_name_a_key_with_a_dot(
    action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["inspect", "f", action, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "JSON array" in text and '["urls","example.com"]' in text
