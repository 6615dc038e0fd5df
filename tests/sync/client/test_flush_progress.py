"""Progress events of long client and hub work: the offline flush and a room's reload.

An agent queues 250 merges offline (its local file), then a real hub comes up: the
reconnect flushes them and the client logs ``offline_flush_start`` / ``_progress`` /
``_done`` with the numbers of merges answered. The hub, restarted on the same ``--db``,
reloads the room: ``room_loading``, the replay's progress, ``room_loaded``, in order.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hubs import FAST, RestartableHub, eventually

from crdt_state import progress
from sync.client._flush import FlushProgress
from sync.client.remote import connect


def events(caplog: pytest.LogCaptureFixture, *names: str) -> list[tuple[str, Any, Any]]:
    return [
        (r.event, getattr(r, "done", None), getattr(r, "total", None))  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) in names or str(getattr(r, "event", "")).startswith(names)
    ]


async def test_a_reconnect_flushing_queued_merges_logs_its_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "DEFAULT_INTERVAL", 1e9)  # reports by count only
    caplog.set_level(logging.INFO, "crdt_state.client")
    hub = RestartableHub(tmp_path / "rooms")
    url = hub.url("flush")
    local = tmp_path / "agent.sqlite"
    async with connect(url, agent="a", local=local, reconnect=FAST, timeout=0.2) as remote:
        assert not remote.connected
        for i in range(250):
            result = await remote.acommit({f"k{i}": i}, remote.token)
            assert result.pending
        assert remote.pending == 250 and events(caplog, "offline_flush_") == []
        await hub.start()
        try:
            await remote.wait_idle(timeout=60)
            await eventually(lambda: len(events(caplog, "offline_flush_done")) == 1, 10)
            assert events(caplog, "offline_flush_") == [
                ("offline_flush_start", 0, 250),
                ("offline_flush_progress", 100, 250),
                ("offline_flush_progress", 200, 250),
                ("offline_flush_done", 250, 250),
            ]
            done = [r for r in caplog.records if getattr(r, "event", "") == "offline_flush_done"]
            assert done[0].complete is True and done[0].hub == url  # type: ignore[attr-defined]
            assert (await hub.state("flush"))["k249"] == 249
            await remote.acommit({"online": True}, remote.token)  # not a flush: no event
            assert len(events(caplog, "offline_flush_")) == 4
        finally:
            await hub.stop()


def test_a_flush_cut_by_a_drop_ends_incomplete(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "crdt_state.client")
    flush = FlushProgress([3, 4, 5], "ws://h/r", "w1")
    flush.ended(4)
    flush.ended(99)  # not part of this flush
    flush.stop()
    flush.ended(5)  # after the drop: nothing more
    assert events(caplog, "offline_flush_") == [
        ("offline_flush_start", 0, 3),
        ("offline_flush_done", 1, 3),
    ]
    assert caplog.records[-1].complete is False and flush.finished  # type: ignore[attr-defined]
    assert caplog.records[-1].writer == "w1"  # type: ignore[attr-defined]


async def test_a_room_reload_reports_its_replay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "DEFAULT_EVERY", 100)
    monkeypatch.setattr(progress, "DEFAULT_INTERVAL", 1e9)
    hub = RestartableHub(tmp_path / "rooms")
    await hub.start()
    try:
        async with connect(hub.url("big"), agent="a") as remote:
            for i in range(250):
                await remote.acommit({f"k{i % 20}": i}, remote.token)
    finally:
        await hub.stop()
    caplog.set_level(logging.DEBUG, "crdt_state")
    caplog.clear()
    await hub.start()
    try:
        assert (await hub.state("big"))["k9"] == 249
    finally:
        await hub.stop()
    got = events(caplog, "room_loading", "room_loaded", "replay_")
    assert [name for name, _, _ in got] == [
        "room_loading",
        "replay_start",
        "replay_progress",
        "replay_progress",
        "replay_done",
        "room_loaded",
    ]
    assert [(done, total) for name, done, total in got if name.startswith("replay_")] == [
        (0, 250),
        (100, 250),
        (200, 250),
        (250, 250),
    ]
