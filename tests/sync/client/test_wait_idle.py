"""``wait_idle`` returns once merges ended and, while connected, the replica synced.

Found as a user: an agent that never reached its hub queued merges in its ``local``
file; when the hub came up they all failed (conflicts), and right after ``wait_idle()``
its snapshot was ``{}`` (2 runs of 6): the answers to queued merges come before the sync
of the new connection (by design: the client sends them first), and ``wait_idle`` only
waited for the merges. Here the hub's sync step 2 is held back half a second, so the
answers surely come first.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hubs import FAST, RestartableHub

from crdt_state import ConflictError
from sync.client.remote import connect
from sync.server._room import Room, Session
from sync.wire import protocol as p


async def test_wait_idle_waits_for_the_sync_after_queued_merges_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    url = hub.url("r")
    try:
        async with connect(url, agent="b") as b:
            await b.acommit({"owner": "b", "n": 10}, b.token)
        await hub.stop()
        async with connect(url, agent="a", local=tmp_path / "a.db", reconnect=FAST) as a:
            async with a.fork() as branch:  # the hub is down: queued, built on nothing
                branch.set("owner", "a")
            assert a.pending == 1 and a.snapshot() == {"owner": "a"}
            send_durable = Room.send_durable

            def later(room: Room, session: Session, frame: bytes) -> None:
                if frame[:2] == bytes((p.MessageType.SYNC, p.SyncStep.STEP2)):
                    asyncio.get_running_loop().call_later(0.5, send_durable, room, session, frame)
                else:
                    send_durable(room, session, frame)

            monkeypatch.setattr(Room, "send_durable", later)
            await hub.start()
            await a.wait_idle(timeout=10)
            assert a.pending == 0 and [type(e) for e in a.failed] == [ConflictError]
            assert a.connected
            assert a.snapshot() == {"owner": "b", "n": 10}
    finally:
        await hub.stop()
