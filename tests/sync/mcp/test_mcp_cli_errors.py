"""``crdt-state mcp`` started wrong: one line saying what and why, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hubs import free_port

ROOT = Path(__file__).resolve().parents[3]


def mcp(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CRDT_STATE_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "sync.cli", "mcp", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "said", "status"),
    [
        (("--db", "missing/dir/x.db"), "[storage]", 1),
        (("--hub", "127.0.0.1:1", "--room", "r"), "(invalid_url)", 2),
        (("--db", "x.db", "--schema", "nowhere:Model"), "--schema nowhere:Model", 1),
        (("--hub", "ws://127.0.0.1:1", "--room", "r", "--token-file", "nofile"), "nofile", 1),
        (("--db", "x.db", "--schema", "os:path"), "is not a pydantic model class", 1),
        (("--hub", "ws://127.0.0.1:1/triage/42", "--room", "r"), "names a room already", 2),
    ],
)
def test_a_start_up_mistake_is_one_line(
    args: tuple[str, ...], said: str, status: int, tmp_path: Path
) -> None:
    done = mcp(*args, cwd=tmp_path)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr and said in done.stderr
    assert done.stderr.startswith("crdt-state mcp:")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = mcp("--db", "x.db", "--transport", "http", "--port", str(port), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr


def test_a_schema_module_beside_the_user_is_found(tmp_path: Path) -> None:
    (tmp_path / "my_model.py").write_text(
        "from pydantic import BaseModel\n\nclass Ticket(BaseModel):\n    status: str = 'new'\n"
    )
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--db", "t.db", "--schema", "my_model:Ticket", "--transport", "http"]
    process = subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "mcp", *args, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("crdt-state mcp on http://"), process.stderr
    finally:
        process.terminate()
        process.wait(10)
