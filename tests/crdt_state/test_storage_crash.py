"""Crash safety: a process merging in a loop is killed with SIGKILL at random moments.

After every kill the file is reopened: every merge that had returned (and was
therefore printed by the child) must be present, and the file must pass
``PRAGMA integrity_check``. The child uses several threads (group commit) and a
short retained history (compaction runs while it is killed).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path as FilePath

import pytest

from crdt_state import SharedState

pytestmark = pytest.mark.slow  # real processes killed mid-write (still run by default)

ROOT = FilePath(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, threading
    from crdt_state import SharedState

    path, durability, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    state = SharedState.open(path, durability=durability, keep_history=40)
    out = threading.Lock()

    def agent(t):
        i = start
        while True:
            branch = state.fork(f"agent{t}")
            branch[f"t{t}"] = i                      # overwritten: exercises compaction
            branch[f"t{t}-{i % 50}"] = [t, i]        # a window of keys
            branch.merge()                           # returns once durable
            with out:
                print(t, i, flush=True)
            i += 1

    print("ready", flush=True)
    for t in range(4):
        threading.Thread(target=agent, args=(t,), daemon=True).start()
    threading.Event().wait()
    """
)


def run_and_kill(file: FilePath, durability: str, start: int, delay: float) -> dict[int, int]:
    """Start the child, SIGKILL it ``delay`` s after it is ready; return acknowledged merges."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(file), durability, str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acked: dict[int, int] = {}
    ready = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ready"):
                ready.set()
                continue
            parts = line.split()
            if len(parts) == 2:  # a line cut by the kill is ignored: it was not acknowledged
                t, i = int(parts[0]), int(parts[1])
                acked[t] = max(i, acked.get(t, -1))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert ready.wait(30), child.stderr.read() if child.stderr else ""
        time.sleep(delay)  # a random moment to kill at, not a wait for convergence
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
        reader.join(30)
        if child.stderr:
            child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    return acked


@pytest.mark.timeout(120)
def test_acknowledged_merges_survive_sigkill(tmp_path: FilePath) -> None:
    file = tmp_path / "crash.db"
    rng = random.Random(20240601)
    start = 0
    total = 0
    began = time.monotonic()
    rounds = 0
    while rounds < 20 and time.monotonic() - began < 40:
        durability = "full" if rounds % 3 else "normal"  # both survive a process crash
        acked = run_and_kill(file, durability, start, rng.uniform(0.0, 0.35))
        rounds += 1
        state = SharedState.open(file)
        try:
            snapshot = state.snapshot()
            for t, i in acked.items():
                assert snapshot.get(f"t{t}", -1) >= i, (rounds, t, i, snapshot.get(f"t{t}"))
                assert snapshot.get(f"t{t}-{i % 50}") == [t, i], (rounds, t, i)
            assert state.at(state.token) == snapshot
            stored = [snapshot.get(f"t{t}", -1) for t in range(4)]
            start = max(stored) + 1  # next round writes newer values
            total += len(acked)
        finally:
            state.close()
        with sqlite3.connect(file) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.close()
    assert rounds >= 10
    assert total > 0  # merges were acknowledged before the kills
