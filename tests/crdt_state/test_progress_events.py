"""Progress of long work as logging events: the pure rhythm, a replay and a compaction.

A real state file with 1,100 changes is reopened with a short history: the replay and
the compaction that follows log start, progress and done, in order, with the numbers
of rows they really went through.
"""

from __future__ import annotations

import logging
from pathlib import Path as FilePath
from typing import Any

import pytest

from crdt_state import SharedState, progress
from crdt_state.progress import ProgressLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def events(caplog: pytest.LogCaptureFixture, prefix: str = "") -> list[tuple[str, Any, Any]]:
    return [
        (r.event, r.done, r.total)  # type: ignore[attr-defined]
        for r in caplog.records
        if str(getattr(r, "event", "")).startswith(prefix)
    ]


def test_progress_every_k_items_or_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "test.progress")
    clock = Clock()
    work = ProgressLog(logging.getLogger("test.progress"), "job", "a job", 10, every=3,
                       interval=0.5, clock=clock, room="r1")  # fmt: skip
    work.start()
    for _ in range(4):  # items 1-4: a report after the third
        clock.now += 0.01
        work.advance()
    clock.now += 0.6  # a slow item: reported because of the time
    work.advance()
    for _ in range(5):
        work.advance()  # items 6-10: at 8 (3 after 5); never for the last item
    clock.now += 0.1
    work.finish(extra_field=1)
    work.finish()  # once
    assert events(caplog) == [
        ("job_start", 0, 10),
        ("job_progress", 3, 10),
        ("job_progress", 5, 10),
        ("job_progress", 8, 10),
        ("job_done", 10, 10),
    ]
    done = caplog.records[-1]
    assert done.complete and done.extra_field == 1 and done.room == "r1"  # type: ignore[attr-defined]
    assert done.seconds == pytest.approx(0.74)  # type: ignore[attr-defined]
    assert done.getMessage() == "a job: done, 10/10 items in 0.740 s"
    assert all(r.levelno == logging.INFO for r in caplog.records)


def test_quiet_work_logs_at_info_only_when_it_is_long(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "test.quiet")
    log = logging.getLogger("test.quiet")
    clock = Clock()
    short = ProgressLog(log, "short", "short", 4, every=2, quiet=True, clock=clock)
    short.start()
    for _ in range(4):
        short.advance()
    short.finish()
    assert [(r.event, r.levelno) for r in caplog.records] == [  # type: ignore[attr-defined]
        ("short_start", logging.DEBUG),
        ("short_progress", logging.DEBUG),
        ("short_done", logging.DEBUG),
    ]
    caplog.clear()
    long = ProgressLog(log, "long", "long", 3, quiet=True, clock=clock)
    long.start()
    clock.now += 0.7
    long.advance()
    clock.now += 0.1
    long.advance()
    long.finish()  # stopped before the last item
    got = [(r.event, r.levelno, r.done) for r in caplog.records]  # type: ignore[attr-defined]
    assert got == [
        ("long_start", logging.DEBUG, 0),
        ("long_progress", logging.INFO, 1),
        ("long_done", logging.INFO, 2),
    ]
    assert caplog.records[-1].complete is False  # type: ignore[attr-defined]
    assert "stopped, 2/3 items" in caplog.records[-1].getMessage()


def test_a_long_replay_and_the_compaction_after_it_report_progress(
    tmp_path: FilePath, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "DEFAULT_INTERVAL", 1e9)  # reports by count only
    file = tmp_path / "long.db"
    with SharedState.open(file, keep_history=100_000, durability="off") as state:
        for i in range(1_100):
            state.commit({f"k{i % 50}": i}, state.token, "w")
    caplog.set_level(logging.DEBUG, "crdt_state.storage")
    caplog.clear()
    state = SharedState.open(file, keep_history=10)
    assert events(caplog, "replay_") == [
        ("replay_start", 0, 1_100),
        ("replay_progress", 1_000, 1_100),
        ("replay_done", 1_100, 1_100),
    ]
    assert all(getattr(r, "store", None) == str(file) for r in caplog.records)
    caplog.clear()
    state.commit({"last": True}, state.token, "w")  # 1,101 rows: fold all but 10
    state.close()
    assert events(caplog, "compaction_") == [
        ("compaction_start", 0, 1_091),
        ("compaction_progress", 1_000, 1_091),
        ("compaction_done", 1_091, 1_091),
    ]
    done = [r for r in caplog.records if getattr(r, "event", "") == "compaction_done"]
    assert done[0].complete is True and done[0].error is None  # type: ignore[attr-defined]
    with SharedState.open(file) as again:  # the compaction really folded those rows
        assert len(again.history()) == 10 and again.get("last") is True
