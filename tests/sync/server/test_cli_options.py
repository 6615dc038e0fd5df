"""The ``crdt-state`` command line: help texts, defaults, validation, ``--version``.

Run as a real subprocess (``python -m sync.cli``): a bad value is an argparse
error (exit status 2, one line naming the option), never a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import crdt_state
from sync.server.hub import Hub

ROOT = Path(__file__).resolve().parents[3]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CRDT_STATE_SECRET"}
    return subprocess.run(
        [sys.executable, "-m", "sync.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=cwd,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["token", "--room", "x", "--secret", "s", "--ttl", "-5"], "--ttl: must be between 1"),
        (["token", "--room", "x", "--secret", "s", "--ttl", "soon"], "--ttl: not a duration"),
        (["token", "--room", "x", "--secret", "s", "--ttl", "0.5s"], "--ttl: must be between 1"),
        (["token", "--room", "x", "--secret", "s", "--ttl", "3651d"], "--ttl: must be between"),
        (["token", "--room", "x", "--secret", "s", "--ttl", "2026-01-01"], "--ttl: not a dura"),
        (["token", "--room", "x", "--secret", "s", "--ttl", "inf"], "--ttl: must be between"),
        (["hub", "--insecure", "--log-level", "verbose"], "--log-level: must be one of DEBUG"),
        (["hub", "--insecure", "--port", "70000"], "--port: must be between 0 and 65535"),
        (["hub", "--insecure", "--port", "-1"], "--port: must be between 0 and 65535"),
        (["hub", "--insecure", "--max-message", "-1"], "--max-message: must be at least 1"),
        (["hub", "--insecure", "--max-connections", "0"], "--max-connections: must be at least"),
        (["hub", "--insecure", "--room-idle-seconds", "-3"], "--room-idle-seconds: must be at"),
        (["hub", "--insecure", "--room-idle-seconds", "nan"], "--room-idle-seconds: must be at"),
        (["hub", "--insecure", "--max-merge-depth", "0"], "--max-merge-depth: must be at least"),
        (["hub", "--insecure", "--max-merge-bytes", "1k"], "--max-merge-bytes: not int"),
        (["mcp", "--db", "x.db", "--log-level", "loud"], "--log-level: invalid choice"),
    ],
)
def test_bad_values_are_argparse_errors(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"crdt-state {crdt_state.__version__}"


@pytest.mark.parametrize("command", ["hub", "token", "mcp"])
def test_every_option_has_help_and_its_default(command: str) -> None:
    done = run_cli(command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "`" not in text  # no reStructuredText markup in help
    options = text.split("options:", 1)[1]
    entries = re.split(r"\n  (?=-)", options)[1:]
    assert len(entries) >= 5
    for entry in entries:
        name = entry.split()[0].rstrip(",")
        if name in ("-h", "--help"):
            continue
        body = " ".join(entry.split())
        assert "(default:" in body, f"{command} {name} has no help or default: {body!r}"


def test_top_level_help_has_no_rst_markup() -> None:
    done = run_cli("--help")
    assert done.returncode == 0 and "`" not in done.stdout
    assert "--version" in done.stdout


def test_db_is_documented_as_the_directory_it_is() -> None:
    text = " ".join(run_cli("hub", "--help").stdout.split())
    assert "--db DIR directory of the rooms' state files" in text
    assert "(default: hub.db)" in text


def test_a_hub_says_where_it_stores_rooms(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "CRDT_STATE_SECRET"}
    process = subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--port", str(port)],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while not lines or "rooms stored in" not in lines[-1]:
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
    finally:
        process.terminate()
        process.wait(10)
    assert lines[-1].strip() == f"rooms stored in directory {tmp_path / 'hub.db'}"


def test_a_hub_that_cannot_listen_says_so_in_one_line() -> None:
    """A port in use or a host that is not an address was a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        in_use = run_cli("hub", "--insecure", "--db", "", "--port", port)
    assert in_use.returncode == 1 and "Traceback" not in in_use.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in in_use.stderr
    bad_host = run_cli(
        "hub", "--insecure", "--insecure-public", "--db", "", "--host", "999.1.1.1", "--port", "0"
    )
    assert bad_host.returncode == 1 and "Traceback" not in bad_host.stderr
    assert "cannot listen on 999.1.1.1:0" in bad_host.stderr


@pytest.mark.parametrize(
    ("ttl", "seconds"), [("1h", 3600), ("90m", 5400), ("2d", 172800), ("45s", 45), ("3600", 3600)]
)
def test_ttl_takes_the_durations_since_takes(ttl: str, seconds: int) -> None:
    """``--since`` took ``10m`` and ``2h``, ``--ttl`` only seconds ("not float")."""
    before = time.time()
    done = run_cli("token", "--room", "x", "--secret", "s", "--ttl", ttl)
    assert done.returncode == 0, done.stderr
    payload = done.stdout.strip().split(".")[0]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert int(before) + seconds - 1 <= claims["exp"] <= time.time() + seconds


def test_a_hub_that_cannot_listen_leaves_no_directory_behind(tmp_path: Path) -> None:
    """``--db new/rooms`` on a port in use exited 1 but left ``new/rooms`` created."""
    (tmp_path / "kept").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for db in ("new/rooms", "kept"):
            done = run_cli("hub", "--insecure", "--db", db, "--port", port, cwd=tmp_path)
            assert done.returncode == 1 and "cannot listen on" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # what was there stays


async def test_a_hub_object_that_cannot_listen_makes_no_directory(tmp_path: Path) -> None:
    """The room directory is made once the hub listens (Python users of ``Hub`` too)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        hub = Hub(port=taken.getsockname()[1], db=tmp_path / "new" / "rooms")
        with pytest.raises(OSError):
            await hub.start()
    assert list(tmp_path.iterdir()) == []
