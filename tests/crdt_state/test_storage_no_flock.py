"""A platform without ``fcntl`` (Windows): crdt_state imports and works, without a process lock.

The missing module is simulated by ``sys.modules["fcntl"] = None`` (``import fcntl``
then raises ``ImportError``), in a fresh interpreter for the import and with
``monkeypatch`` in this one for the lock itself. The writer then warns
:class:`NoProcessLock` and takes no ``flock`` (another descriptor can take one); a
second writer in this process is still refused.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path as FilePath

import pytest

from crdt_state import SharedState, StorageError
from crdt_state._file_lock import NoProcessLock

ROOT = FilePath(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

WITHOUT_FCNTL = textwrap.dedent(
    """
    import sys, warnings
    sys.modules["fcntl"] = None  # as on Windows: import fcntl raises ImportError
    import crdt_state, sync.server, sync.client
    from crdt_state import SharedState
    file = sys.argv[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = SharedState.open(file)
    state.commit({"k": 1}, state.token, "a")
    state.close()
    again = SharedState.open(file, read_only=True)
    print(again.snapshot(), [type(w.message).__name__ for w in caught])
    again.close()
    """
)


def _flock_elsewhere(file: FilePath) -> bool:
    """True when a new descriptor of ``file`` can take the exclusive ``flock``."""
    fd = os.open(file, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # drops the lock taken, if any
    return True


def test_crdt_state_imports_and_stores_without_fcntl(tmp_path: FilePath) -> None:
    file = tmp_path / "nofcntl.db"
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_FCNTL, str(file)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["{'k':", "1}", "['NoProcessLock']"]


def test_without_fcntl_the_writer_warns_and_takes_no_process_lock(
    tmp_path: FilePath, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked, unlocked = tmp_path / "locked.db", tmp_path / "unlocked.db"
    with SharedState.open(locked):  # fcntl present: the lock is held
        assert not _flock_elsewhere(locked)
    monkeypatch.setitem(sys.modules, "fcntl", None)
    with pytest.warns(NoProcessLock, match="not locked against writers in other processes"):
        state = SharedState.open(unlocked)
    try:
        monkeypatch.undo()
        assert _flock_elsewhere(unlocked)  # nothing holds it
        with pytest.raises(StorageError) as info:  # this process still knows its files
            SharedState.open(unlocked)
        assert info.value.details["reason"] == "open_in_this_process"
        state.commit({"k": 1}, state.token, "a")
    finally:
        state.close()
    with SharedState.open(unlocked) as again:  # fcntl back: locked as before
        assert again.snapshot() == {"k": 1}
        assert not _flock_elsewhere(unlocked)
