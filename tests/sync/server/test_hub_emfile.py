"""Out of file descriptors is reported as what it is, not as a damaged state file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Leaves exactly `free` descriptors free, then opens one more state file: with 0 free the
# first open() fails, with 1 SQLite fails opening the -wal file (which it reports as
# "unable to open database file": it used to be called damage).
SCRIPT = """
import os, resource, sys
from crdt_state import SharedState, StorageError
SharedState.open(sys.argv[1] + "/warm-up.sqlite").close()  # imports done
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
for free in (0, 1):
    filler = []
    try:
        while True:
            filler.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    for fd in filler[len(filler) - free:]:
        os.close(fd)
    try:
        SharedState.open(sys.argv[1] + f"/room-{free}.sqlite").close()
        print(free, "OPENED")
    except StorageError as exc:
        print(free, "REFUSED", exc.details.get("errno"), str(exc))
    finally:
        for fd in filler[: len(filler) - free]:
            os.close(fd)
state = SharedState.open(sys.argv[1] + "/room-1.sqlite")
print("REOPENED", state.snapshot())
"""


def test_running_out_of_descriptors_is_reported_as_emfile(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stdout + done.stderr
    for line in lines[:2]:
        assert "REFUSED EMFILE" in line, line
        assert "damaged" not in line and "too many open files" in line.lower()
    assert lines[2] == "REOPENED {}"  # nothing was left half-made by the refusals
