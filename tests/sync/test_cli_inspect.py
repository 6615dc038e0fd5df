"""``crdt-state inspect``: the actions against durable files written here, --json parsed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crdt_state import SharedState, resolvers
from sync.cli import main
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


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


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
    assert code == 2 and "no change with seq 99" in err


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


async def test_a_hub_room_by_name_and_a_busy_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "rooms"
    async with Hub(port=0, db=db) as hub:
        async with connect(hub.url("team/a"), agent="carol") as carol:
            await carol.acommit({"x": 1}, carol.token)
        code, _, err = run(capsys, "--db", str(db), "team/a", "show")
        assert code == 2 and "cannot open" in err  # the hub holds it
    shown = run_json(capsys, "--db", str(db), "team/a", "show")
    assert shown["value"] == {"x": 1}
    (entry,) = run_json(capsys, "--db", str(db), "team/a", "history")
    assert entry["agent"] == "carol"
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
