"""The owner's hub applies what its owner publishes at once, without reading ``out`` back.

Two hubs in this process serve one room on a private redis-server and the module's
throwaway PostgreSQL database. The hub that owns the room applies each entry its owner
published to its replica right after the publish, and its follower leaves the room out of
its reads; the other hub follows ``out`` as before. When the owner steps down, its hub's
follower reads the room again, so what the next owner publishes still arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import pytest

from crdt_state import SharedState
from sync import Hub, connect
from sync.server._room import Room
from sync.server.cluster.cluster_room import ClusterRoom
from sync.server.cluster.streams import OutEntry

pytestmark = pytest.mark.slow


async def until(check: Any, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)


def cluster_room(hub: Hub, room: str) -> ClusterRoom:
    node = hub._cluster
    assert node is not None
    return node.rooms[room]


def count_reads(room: ClusterRoom) -> list[str]:
    """The ids of the ``out`` entries the hub's follower hands to ``room`` from now on."""
    read: list[str] = []
    follow = room.apply_entries

    def counted(entries: Sequence[tuple[str, Mapping[bytes | str, bytes | str]]]) -> None:
        read.extend(entry_id for entry_id, _ in entries)
        follow(entries)

    room.apply_entries = counted  # type: ignore[method-assign]
    return read


async def test_the_owner_hub_applies_its_entries_without_reading_them_back(
    hubs: tuple[Hub, Hub],
) -> None:
    a, b = hubs
    room = "local/apply"
    async with connect(a.url(room), agent="opener") as opener:  # A opens first: A owns it
        await opener.acommit({"opened": True}, opener.token)
        owned = cluster_room(a, room)
        await until(lambda: owned.owner is not None)
        read_on_a = count_reads(owned)
        applied_on_a = owned.applied
        async with connect(b.url(room), agent="on-b") as on_b:
            await until(lambda: on_b.get("opened") is True)
            read_on_b = count_reads(cluster_room(b, room))
            for i in range(10):
                await opener.acommit({("by_a", f"k{i}"): i}, opener.token)
                await on_b.acommit({("by_b", f"k{i}"): i}, on_b.token)
            await until(lambda: opener.get(("by_b", "k9")) == 9 and on_b.get(("by_a", "k9")) == 9)
            assert opener.snapshot() == on_b.snapshot()
    assert owned.owner is not None  # A owned the room throughout
    assert read_on_a == []  # A's follower read none of its owner's entries
    assert owned.applied - applied_on_a >= 1  # they were applied by the owner's publish
    assert owned.current()  # and the room stays out of A's reads
    assert read_on_b  # B followed out as before
    assert owned.position == cluster_room(b, room).position  # both replicas at one entry


async def test_after_the_owner_steps_down_its_hub_follows_the_next_owner(
    hubs: tuple[Hub, Hub],
) -> None:
    a, b = hubs
    room = "local/handover"
    async with connect(a.url(room), agent="on-a") as on_a:
        await on_a.acommit({"n": 0}, on_a.token)
        owned = cluster_room(a, room)
        await until(lambda: owned.owner is not None)
        async with connect(b.url(room), agent="on-b") as on_b:
            await until(lambda: on_b.get("n") == 0)
            other = cluster_room(b, room)
            # A stops contending for the room: its owner ends and releases the lease, and
            # B's contender takes the room (A keeps the room open and following)
            await owned.stop()
            await until(lambda: other.owner is not None)
            assert owned.owner is None and owned.own_tail is None and not owned.current()
            read_on_a = count_reads(owned)
            for i in range(1, 6):  # judged and published by B, answered on A through out
                await on_a.acommit({"n": i}, on_a.token)
            await until(lambda: on_b.get("n") == 5)
            assert on_a.get("n") == 5
    assert read_on_a  # A's follower reads the room again
    assert other.current() and owned.position == other.position


class _Node:
    """What a ClusterRoom reads of its node when applying entries."""

    hub_id = "this-hub"
    merge_answered = None


class _Lease:
    def __init__(self) -> None:
        self.holds = True

    def valid(self) -> bool:
        return self.holds


async def test_published_entries_apply_only_to_a_current_replica() -> None:
    """The rules of ``published``/``current``, without servers: an entry is applied when
    the replica is at the owner's newest entry, left to the follower otherwise; a failed
    apply reloads the replica instead of stopping the owner."""
    writer = SharedState()
    updates: list[bytes] = []
    writer.subscribe(lambda change: updates.append(change.update))
    writer.commit({"a": 1}, writer.token, "w")
    writer.commit({"b": 2}, writer.token, "w")
    writer.commit({"c": 3}, writer.token, "w")
    replica = SharedState(follower=True)
    room = ClusterRoom(_Node(), Room("unit", replica, asyncio.get_running_loop()), "5-0")  # type: ignore[arg-type]
    lease = _Lease()
    room._ownership, room.own_tail = lease, "5-0"  # type: ignore[assignment]
    assert room.current()
    room.published("6-0", OutEntry(updates[0], "1-0", 1))
    # the replica is read through its room (which applies what it relayed first)
    assert (room.position, room.own_tail, room.room.state.get("a")) == ("6-0", "6-0", 1)
    room.position = "7-0"  # the follower read the owner's next entry first
    assert room.current()  # past the owner's newest: still nothing to read
    room.published("7-0", OutEntry(updates[1], "2-0", 1))  # applied already: not again
    assert room.room.state.get("b") is None and room.applied == 1 and room.own_tail == "7-0"
    lease.holds = False  # the lease may be gone: another hub might publish
    assert not room.current()
    lease.holds = True
    room.position = "6-5"  # behind the owner's newest: left to the follower
    assert not room.current()
    room.published("8-0", OutEntry(updates[2], "3-0", 1))
    assert room.room.state.get("c") is None and room.position == "6-5" and room.own_tail == "8-0"
    room.position = "8-0"

    def broken(*_: object, **__: object) -> NoReturn:
        raise RuntimeError("cannot apply")

    replica.apply_update = broken  # type: ignore[method-assign]
    room.published("9-0", OutEntry(updates[2], "3-0", 1))  # raises nothing
    assert room.own_tail == "9-0" and room.room.state.get("c") is None  # reading applies
    assert room.stale  # it failed: the follower reloads the replica
