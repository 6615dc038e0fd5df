"""Opening one state file from several places: racing processes, a holder, this process.

Real subprocesses start together (each waits for a common start time after its
imports) and open one file: they take turns (:func:`connect` retries a briefly
locked file) instead of being refused. A file really held elsewhere is refused
naming the holder's pid; a second opening in this process says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path as FilePath

import pytest

from crdt_state import SharedState, StorageError

ROOT = FilePath(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

RACER = textwrap.dedent(
    """
    import json, sys, time
    from crdt_state import SharedState, StorageError
    file, start, name, hold = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    time.sleep(max(0.0, start - time.time()))
    began = time.monotonic()
    try:
        state = SharedState.open(file)
    except StorageError as exc:
        details = {k: str(v) for k, v in exc.details.items()}
        print(json.dumps({"error": exc.message, "details": details}))
        sys.exit(3)
    waited = time.monotonic() - began
    state.commit({name: True}, state.token, name)
    time.sleep(hold)
    state.close()
    print(json.dumps({"waited": waited}))
    """
)


def race(
    file: FilePath, names: list[str], hold: float, delay: float = 2.5
) -> list[dict[str, object]]:
    start = time.time() + delay  # after every interpreter has started and imported
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(file), repr(start), name, repr(hold)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for name in names
    ]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode in (0, 3), stderr
        out.append({"rc": proc.returncode, **json.loads(stdout.strip().splitlines()[-1])})
    return out


def test_processes_opening_one_file_at_the_same_moment_take_turns(tmp_path: FilePath) -> None:
    for round_ in range(3):
        file = tmp_path / f"race-{round_}.db"
        names = [f"p{i}" for i in range(3)]
        results = race(file, names, hold=0.05)
        assert [r["rc"] for r in results] == [0, 0, 0], results
        state = SharedState.open(file)
        assert state.snapshot() == {name: True for name in names}
        state.close()


def test_a_file_held_by_another_process_is_refused_naming_its_pid(tmp_path: FilePath) -> None:
    file = tmp_path / "held.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", RACER, str(file), "0", "holder", "30"],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        deadline = time.monotonic() + 30
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        began = time.monotonic()
        with pytest.raises(StorageError) as info:
            SharedState.open(file)
        waited = time.monotonic() - began
    finally:
        holder.kill()
        holder.communicate()
    assert info.value.details["reason"] == "open_in_another_process"
    assert info.value.details["pid"] == holder.pid
    assert f"open in another process (pid {holder.pid})" in str(info.value)
    assert 1.0 <= waited < 10  # retried for a short while, not forever
    again = SharedState.open(file)  # the holder is gone: its lock went with it
    assert again.snapshot() == {"holder": True}
    again.close()


def test_a_second_opening_in_this_process_says_so(tmp_path: FilePath) -> None:
    file = tmp_path / "twice.db"
    state = SharedState.open(file)
    began = time.monotonic()
    with pytest.raises(StorageError) as info:
        SharedState.open(file)
    assert time.monotonic() - began < 1.0  # no point waiting for ourselves
    assert info.value.details == {"file": str(file), "reason": "open_in_this_process"}
    assert "already open in this process" in str(info.value)
    with pytest.raises(StorageError, match="already open in this process"):
        SharedState.open(FilePath(str(file).replace("twice.db", "./twice.db")))
    state.close()
    again = SharedState.open(file)
    again.close()
