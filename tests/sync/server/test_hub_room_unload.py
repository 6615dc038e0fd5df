"""Rooms without connections are unloaded (file closed, memory freed) and reload on join."""

from __future__ import annotations

import asyncio
import gc
import os
import weakref
from pathlib import Path

from hubs import eventually
from websockets.asyncio.client import connect as ws_connect

from sync.client.remote import connect
from sync.server.hub import Hub
from sync.server.limits import Limits


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def test_an_idle_room_is_unloaded_and_reloads_with_its_content(tmp_path: Path) -> None:
    limits = Limits(room_idle_seconds=0.2)
    async with Hub(port=0, db=tmp_path / "hub.db", limits=limits) as hub:
        async with connect(hub.url("team/a"), agent="a") as a:
            await a.acommit({"n": 1}, a.token)
            await asyncio.sleep(0.5)  # joined: stays loaded however long
            assert "team/a" in hub.rooms
        await eventually(lambda: "team/a" not in hub.rooms and not hub._registry.unloading)
        async with connect(hub.url("team/a"), agent="b") as b:
            await eventually(lambda: b.get("n") == 1)
            await b.acommit({"n": 2}, b.token)
        assert (await hub.room("team/a")).state.snapshot() == {"n": 2}


async def test_an_unloaded_room_is_freed_without_the_cyclic_collector(tmp_path: Path) -> None:
    """Unloading leaves no reference cycle: the room, its state and its store are gone
    once unloaded, by reference counting alone (the ``crdt-state hub`` command tunes the
    collector to run full collections rarely; rooms in cycles piled up until then).
    """
    limits = Limits(room_idle_seconds=0.05)
    async with Hub(port=0, db=tmp_path / "hub.db", limits=limits) as hub:
        gc.collect()
        gc.disable()
        try:
            async with connect(hub.url("team/freed"), agent="a") as a:
                await a.acommit({"n": 1}, a.token)
                room = hub.rooms["team/freed"]
                store = room.state._core.store
                assert store is not None
                refs: list[weakref.ref[object]] = [
                    weakref.ref(room),
                    weakref.ref(room.state),
                    weakref.ref(store),
                ]
                del room, store
            await eventually(lambda: not hub.rooms and not hub._registry.unloading)
            try:  # a callback already queued on the loop may hold the room a moment longer
                await eventually(lambda: all(ref() is None for ref in refs), timeout=2)
            except TimeoutError:
                alive = [obj for obj in (ref() for ref in refs) if obj is not None]
                held = {type(r).__name__ for obj in alive for r in gc.get_referrers(obj)}
                raise AssertionError(f"still referenced (a cycle?) by {sorted(held)}") from None
        finally:
            gc.enable()


async def test_rooms_stay_loaded_without_a_database(tmp_path: Path) -> None:
    async with Hub(port=0, limits=Limits(room_idle_seconds=0.05)) as hub:
        async with connect(hub.url("mem"), agent="a") as a:
            await a.acommit({"kept": True}, a.token)
        await asyncio.sleep(0.3)
        assert hub.rooms["mem"].state.snapshot() == {"kept": True}


async def test_two_thousand_rooms_opened_and_left_return_descriptors(tmp_path: Path) -> None:
    limits = Limits(room_idle_seconds=0.05)
    async with Hub(port=0, db=tmp_path / "hub.db", limits=limits) as hub:
        async with ws_connect(hub.url("warm-up")):
            await eventually(lambda: "warm-up" in hub.rooms)
        await eventually(lambda: not hub.rooms and not hub._registry.unloading)
        gc.collect()
        fds_before, rss_before = open_fds(), rss_mib()
        most_loaded = 0

        async def visit(i: int) -> None:
            async with ws_connect(hub.url(f"churn/{i}")) as ws:
                await ws.recv()  # the hub's greeting: the room is loaded

        for start in range(0, 2000, 50):
            await asyncio.gather(*(visit(i) for i in range(start, start + 50)))
            most_loaded = max(most_loaded, len(hub.rooms))
        await eventually(lambda: not hub.rooms and not hub._registry.unloading, timeout=30)
        gc.collect()
        fds_after, rss_after = open_fds(), rss_mib()
        print(
            f"fds {fds_before} -> {fds_after}, RSS {rss_before:.1f} -> {rss_after:.1f} MiB, "
            f"at most {most_loaded} rooms loaded"
        )
        assert fds_after <= fds_before + 10
        assert rss_after <= rss_before + 48  # no unloading: +450 MiB
        assert len(list((tmp_path / "hub.db").glob("churn*.sqlite"))) == 2000
