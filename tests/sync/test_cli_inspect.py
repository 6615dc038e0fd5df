"""``crdt-state inspect``: the actions against durable files written here, --json parsed."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from inspect_runs import run, run_json
from rich.console import Console
from rich.text import Text

from crdt_state import SharedState, resolvers
from sync import cli_inspect
from sync.cli_inspect import format_table, parse_since
from sync.client.remote import connect
from sync.server.hub import Hub


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    """A state file: alice creates the plan, then alice and bob both set its owner."""
    file = tmp_path / "state.sqlite"
    with SharedState.open(file, resolvers={"plan.owner": resolvers.last_writer_wins}) as state:
        state.commit({"plan": {"owner": "nobody", "steps": 1}}, state.token, "alice")
        base = state.token
        state.commit({"plan.owner": "alice"}, base, "alice")
        state.commit({"plan.owner": "bob", "plan.steps": 2}, base, "bob")
    return file


def test_show_prints_the_content_or_one_path(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_json(capsys, str(state_file), "show")
    assert shown["value"] == {"plan": {"owner": "bob", "steps": 2}} and shown["seq"] == 3
    assert run_json(capsys, str(state_file), "show", "plan.owner")["value"] == "bob"
    code, out, _ = run(capsys, str(state_file), "show", "plan")
    assert code == 0 and json.loads(out) == {"owner": "bob", "steps": 2}
    code, _, err = run(capsys, str(state_file), "show", "plan.nothing")
    assert code == 2 and "nothing at path" in err


def test_history_filters_by_agent_path_and_time(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = run_json(capsys, str(state_file), "history")
    assert [(e["seq"], e["agent"]) for e in entries] == [(1, "alice"), (2, "alice"), (3, "bob")]
    assert entries[2]["paths"] == [["plan", "owner"], ["plan", "steps"]]
    assert all(e["local_time"] and e["token"] for e in entries)
    bob = run_json(capsys, str(state_file), "history", "--agent", "bob")
    assert [e["seq"] for e in bob] == [3]
    steps = run_json(capsys, str(state_file), "history", "--path", "plan.steps")
    assert [e["seq"] for e in steps] == [1, 3]  # written inside the plan, then by bob
    assert run_json(capsys, str(state_file), "history", "--since", "1h") == entries
    future = run_json(capsys, str(state_file), "history", "--since", "2999-01-01T00:00")
    assert future == []
    code, out, _ = run(capsys, str(state_file), "history")
    assert code == 0
    header, rule, *rows = out.splitlines()
    assert header.split() == ["seq", "time", "agent", "origin", "paths", "token"]
    assert set(rule) <= {"-", " "} and len(rows) == 3 and "bob" in rows[2]


def test_blame_names_the_last_writer(state_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blamed = run_json(capsys, str(state_file), "blame", "plan.owner")
    assert blamed["agent"] == "bob" and blamed["seq"] == 3 and blamed["path"] == ["plan", "owner"]
    code, out, _ = run(capsys, str(state_file), "blame", "plan.owner")
    assert code == 0 and "last written by bob" in out


def test_conflicts_show_both_agents_and_the_resolution(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (conflict,) = run_json(capsys, str(state_file), "conflicts")
    assert conflict["path"] == ["plan", "owner"]
    assert (conflict["base"], conflict["current"], conflict["incoming"]) == (
        "nobody",
        "alice",
        "bob",
    )
    assert (conflict["current_agent"], conflict["incoming_agent"]) == ("alice", "bob")
    assert conflict["policy"] == "last_writer_wins" and conflict["resolution"] == "bob"
    assert run_json(capsys, str(state_file), "conflicts", "--path", "plan.steps") == []
    code, out, _ = run(capsys, str(state_file), "conflicts")
    assert code == 0 and "alice <- bob" in out and "last_writer_wins" in out


def test_at_travels_back_by_token_or_seq(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_json(capsys, str(state_file), "at", "1")
    assert first["state"] == {"plan": {"owner": "nobody", "steps": 1}}
    entries = run_json(capsys, str(state_file), "history")
    second = run_json(capsys, str(state_file), "at", entries[1]["token"])
    assert second["state"] == {"plan": {"owner": "alice", "steps": 1}}
    code, _, err = run(capsys, str(state_file), "at", "99")
    assert code == 2 and "no change with seq 99 in the retained history (seq 1 to 3)" in err


def test_export_writes_everything_and_leaves_the_file_alone(
    state_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = state_file.read_bytes()
    exported = run_json(capsys, str(state_file), "export")
    assert exported["state"] == {"plan": {"owner": "bob", "steps": 2}}
    assert len(exported["history"]) == 3 and len(exported["conflicts"]) == 1
    out = tmp_path / "export.json"
    code, _, _ = run(capsys, str(state_file), "export", "-o", str(out))
    assert code == 0 and json.loads(out.read_text())["seq"] == exported["seq"]
    assert state_file.read_bytes() == before  # inspecting never writes


async def test_a_hub_room_by_name_while_the_hub_holds_it_and_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "rooms"
    async with Hub(port=0, db=db) as hub, connect(hub.url("team/a"), agent="carol") as carol:
        await carol.acommit({"x": 1}, carol.token)
        # the hub holds the file: read without a lock
        assert run_json(capsys, "--db", str(db), "team/a", "show")["value"] == {"x": 1}
        await carol.acommit({"x": 2}, carol.token)  # and the hub still writes it
        assert run_json(capsys, "--db", str(db), "team/a", "show")["value"] == {"x": 2}
    shown = run_json(capsys, "--db", str(db), "team/a", "show")
    assert shown["value"] == {"x": 2}
    entries = run_json(capsys, "--db", str(db), "team/a", "history")
    assert [e["agent"] for e in entries] == ["carol", "carol"]
    code, _, err = run(capsys, "--db", str(db), "team/none", "show")
    assert code == 2 and "no state file" in err


def test_since_and_tables() -> None:
    assert parse_since("10m", now=1000.0) == 400.0
    assert parse_since("2h", now=10_000.0) == 2800.0
    assert parse_since("1733220000") == 1733220000.0
    with pytest.raises(Exception, match="not a time"):
        parse_since("yesterday-ish")
    table = format_table(("a", "bb"), [("x" * 60, 1), ("y", "z")]).splitlines()
    assert table[0] == "a" + " " * 49 + "bb" and table[2].startswith("x" * 47 + "…")


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_inspect.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["inspect", *argv])


def terminal() -> tuple[Console, io.StringIO]:
    sink = io.StringIO()
    return Console(file=sink, force_terminal=True, width=200, color_system="standard"), sink


def test_plain_tables_when_stdout_is_not_a_terminal(state_file: Path) -> None:
    out = io.StringIO()  # no isatty: plain aligned text, exactly as format_table lays it out
    assert cli_inspect.run(parsed(str(state_file), "conflicts"), out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["time", "path", "base", "current", "incoming", "agents",
                                "policy", "resolution", "applied"]  # fmt: skip
    assert set(lines[1]) == {"-", " "} and len(lines) == 3
    assert "\x1b" not in out.getvalue() and "│" not in out.getvalue()
    history, data = io.StringIO(), io.StringIO()
    assert cli_inspect.run(parsed(str(state_file), "history"), history) == 0
    assert cli_inspect.run(parsed(str(state_file), "history", "--json"), data) == 0
    rows = [
        (str(e["seq"]), e["local_time"], e["agent"], e["origin"],
         ", ".join(".".join(p) for p in e["paths"]), e["token"])
        for e in json.loads(data.getvalue())
    ]  # fmt: skip
    headers = ("seq", "time", "agent", "origin", "paths", "token")
    assert history.getvalue() == format_table(headers, rows) + "\n"


def test_rich_tables_on_a_terminal(state_file: Path) -> None:
    console, sink = terminal()
    out = io.StringIO()
    assert cli_inspect.run(parsed(str(state_file), "conflicts"), out, console=console) == 0
    assert out.getvalue() == ""  # everything went through the console
    shown = sink.getvalue()
    assert "\x1b[1m" in shown  # bold headers
    text = Text.from_ansi(shown).plain
    assert "┃" in text and "│" in text  # a drawn table, not aligned text
    for cell in ("plan.owner", "alice <- bob", "last_writer_wins", '"nobody"', "yes"):
        assert cell in text, cell
    console, sink = terminal()
    assert cli_inspect.run(parsed(str(state_file), "history"), out, console=console) == 0
    rows = [line for line in Text.from_ansi(sink.getvalue()).plain.splitlines() if "│" in line]
    assert len(rows) == 3 and "bob" in rows[2] and "alice" in rows[0]
    console, sink = terminal()  # --json never goes through rich
    assert cli_inspect.run(parsed(str(state_file), "history", "--json"), out, console=console) == 0
    assert sink.getvalue() == "" and len(json.loads(out.getvalue())) == 3


def test_a_long_export_shows_a_progress_bar_on_a_terminal_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "long.sqlite"
    with SharedState.open(file) as state:
        for i in range(120):
            state.commit({f"k{i % 7}": i}, state.token, f"agent{i % 3}")
    bar, sink = terminal()
    out = io.StringIO()
    assert cli_inspect.run(parsed(str(file), "export"), out, progress_console=bar) == 0
    exported = json.loads(out.getvalue())  # stdout holds the JSON alone
    assert len(exported["history"]) == 120
    drawn = Text.from_ansi(sink.getvalue()).plain
    assert "exporting" in drawn and "120/120" in drawn and "━" in drawn
    plain = io.StringIO()  # stderr not a terminal (pytest captures it): no bar anywhere
    assert cli_inspect.run(parsed(str(file), "export"), plain) == 0
    assert json.loads(plain.getvalue())["history"] == exported["history"]
    assert capsys.readouterr().err == ""


def test_a_reader_that_stops_early_is_not_an_error(state_file: Path) -> None:
    """``crdt-state inspect FILE history --json | head -1``: no traceback, exit 0."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "inspect", str(state_file), "history", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(1) == b"["  # read a little, then go away like ``head``
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err
