"""A hub's replica gets followed updates late; its sessions and its readers never notice.

Unit tests (no servers) of :class:`~sync.server.cluster.backlog.Backlog` on a real
:class:`~sync.server._room.Room`: sessions get each update at once, the replica gets what
waits as one update before it is next read (through ``room.state``), once enough waits,
or after :data:`~sync.server.cluster.backlog.DELAY`. Then two hubs in this process (a
private redis-server, the module's throwaway PostgreSQL database): clients joining the
following hub in the middle of a burst of merges on the owner's hub end with every merge,
and merges sent through the following hub do not apply its backlog each.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, NoReturn

import pytest

from crdt_state import SharedState
from crdt_state.errors import InvalidUpdate
from sync import Hub, connect
from sync.server._room import Room, Session
from sync.server.cluster import backlog as backlog_module
from sync.server.cluster.backlog import Backlog
from sync.wire.protocol import SyncUpdate, decode_message


def _updates(count: int) -> tuple[SharedState, list[bytes]]:
    owner = SharedState()
    updates: list[bytes] = []
    owner.subscribe(lambda change: updates.append(change.update))
    for n in range(count):
        owner.commit({f"k{n}": n}, owner.token, "w")
    return owner, updates


def _room() -> tuple[Room, SharedState, list[Any], Session]:
    replica = SharedState(follower=True)
    changes: list[Any] = []
    replica.subscribe(changes.append)
    room = Room("unit", replica, asyncio.get_running_loop())
    session = Session(grant=None, remote="test", max_outbox=1 << 20)
    room.join(session)
    return room, replica, changes, session


def _sent(session: Session) -> SharedState:
    """A replica holding every update frame ``session`` was sent."""
    got = SharedState(follower=True)
    while (frame := session.outbox.get_nowait()) is not None:
        message = decode_message(frame)
        if isinstance(message, SyncUpdate):
            got.apply_update(message.update)
    return got


async def test_sessions_get_each_update_at_once_the_replica_when_read() -> None:
    owner, updates = _updates(5)
    room, replica, changes, session = _room()
    backlog = Backlog(room, lambda: None)
    for update in updates:
        backlog.add(update)
    await asyncio.sleep(0)  # the room's flush
    assert _sent(session).snapshot() == owner.snapshot()  # one frame, every update
    assert changes == [] and replica.snapshot() == {}  # the replica itself: not yet
    assert backlog.pending == 5
    assert room.state.snapshot() == owner.snapshot()  # reading through the room applies
    assert len(changes) == 1 and backlog.settled == 1 and backlog.pending == 0
    assert room.size >= sum(map(len, updates))  # counted once, when relayed
    await asyncio.sleep(0)
    assert session.outbox.empty()  # applying sent nothing again
    assert room.state.token == owner.token and backlog.settled == 1  # nothing more to do


async def test_a_new_session_syncs_everything_relayed_before_it_joined() -> None:
    owner, updates = _updates(4)
    room, _, _, first = _room()
    backlog = Backlog(room, lambda: None)
    for update in updates[:3]:
        backlog.add(update)
    await asyncio.sleep(0)
    late = Session(grant=None, remote="late", max_outbox=1 << 20)
    room.join(late)
    backlog.add(updates[3])  # relayed, queued to every session (the late one too)
    # the hub answers the late session's sync step 1 from room.state
    step2 = room.state.get_update()
    got = SharedState(follower=True)
    got.apply_update(step2)
    assert got.snapshot() == owner.snapshot()
    await asyncio.sleep(0)  # the room's flush
    assert _sent(first).snapshot() == owner.snapshot()
    assert _sent(late).snapshot() == {"k3": 3}


async def test_enough_waiting_updates_or_the_delay_apply_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backlog_module, "MAX_UPDATES", 3)
    monkeypatch.setattr(backlog_module, "DELAY", 0.05)
    owner, updates = _updates(5)
    room, replica, changes, _ = _room()
    backlog = Backlog(room, lambda: None)
    for update in updates[:3]:
        backlog.add(update)
    assert len(changes) == 1 and backlog.pending == 0  # the third applied all three
    backlog.add(updates[3])
    backlog.add(updates[4])
    assert len(changes) == 1 and backlog.pending == 2
    await asyncio.sleep(0.2)
    assert len(changes) == 2 and backlog.pending == 0  # the delay ran out
    assert replica.snapshot() == owner.snapshot()


async def test_a_refused_update_is_dropped_and_other_failures_reload() -> None:
    owner, updates = _updates(3)
    room, replica, _, _ = _room()
    failed: list[bool] = []
    backlog = Backlog(room, lambda: failed.append(True))
    real = replica.apply_update
    refused = updates[1]

    def refusing(update: bytes, **kwargs: Any) -> Any:
        if update == refused or len(update) > max(map(len, updates)):  # merged or the one
            raise InvalidUpdate("refused for the test")
        return real(update, **kwargs)

    replica.apply_update = refusing  # type: ignore[method-assign]
    for update in updates:
        backlog.add(update)
    state = room.state
    assert state.get("k0") == 0 and state.get("k2") == 2 and state.get("k1") is None
    assert failed == []  # refused (logged): the owner accepted it, nothing to reload

    def broken(*_: object, **__: object) -> NoReturn:
        raise RuntimeError("cannot apply")

    replica.apply_update = broken  # type: ignore[method-assign]
    backlog.add(updates[1])
    assert room.state is replica and failed == [True]  # the reader goes on; reload asked
    assert owner.get("k1") == 1


async def test_reads_on_other_threads_while_the_loop_adds_lose_nothing() -> None:
    owner, updates = _updates(300)
    room, _, _, _ = _room()
    backlog = Backlog(room, lambda: None)
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            room.state.snapshot()

    worker = threading.Thread(target=reader)
    worker.start()
    try:
        for update in updates:
            backlog.add(update)
            if update[-1] % 7 == 0:  # let the flushes run now and then
                await asyncio.sleep(0)
    finally:
        done.set()
        worker.join()
    assert room.state.snapshot() == owner.snapshot()


@pytest.mark.slow
async def test_clients_joining_a_following_hub_mid_burst_get_every_merge(
    hubs: tuple[Hub, Hub],
) -> None:
    a, b = hubs
    name = "backlog/burst"
    count = 120
    async with contextlib.AsyncExitStack() as stack:
        writer = await stack.enter_async_context(connect(a.url(name), agent="writer"))
        await writer.acommit({"opened": True}, writer.token)  # A opened it first: A owns it
        clients = [await stack.enter_async_context(connect(b.url(name), agent="early"))]

        async def burst() -> None:
            for n in range(count):
                await writer.acommit({f"k{n}": n}, writer.token)

        merging = asyncio.create_task(burst())
        for n in range(4):  # join B while A's owner publishes
            await asyncio.sleep(0.05)
            clients.append(await stack.enter_async_context(connect(b.url(name), agent=f"l{n}")))
        assert not merging.done()  # they joined in the middle of the burst
        await merging
        expected = writer.snapshot()
        assert expected.get(f"k{count - 1}") == count - 1
        async with asyncio.timeout(15):
            while not all(client.snapshot() == expected for client in clients):
                await asyncio.sleep(0.01)
        node = b._cluster
        assert node is not None
        followed = node.rooms[name]
        assert followed.room.state.snapshot() == expected  # B's replica
        # merges sent through B are forwarded without reading (so applying) its replica
        settled = followed.backlog.settled
        for n in range(30):
            await clients[0].acommit({"from_b": n}, clients[0].token)
        assert followed.backlog.settled - settled < 10  # (the 1 s delay's applies)
        assert followed.room.state.get("from_b") == 29
