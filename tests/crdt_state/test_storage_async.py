"""Durable states under asyncio, durability callbacks, request ids across reopen (per store)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from crdt_state import Change, SharedState, StorageError
from crdt_state.journal import settle_on_loop


async def test_async_merges_are_durable_when_they_return(stores: Any) -> None:
    place = stores.fresh()
    state = place.open()
    ticks = 0
    stop = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    beat = asyncio.create_task(heartbeat())

    async def agent(i: int) -> None:
        for n in range(10):
            async with state.fork(f"agent{i}") as branch:
                branch.set(("results", f"a{i}"), n)
            await state.acommit({("log", f"a{i}-{n}"): n}, state.token, f"agent{i}")

    await asyncio.gather(*(agent(i) for i in range(20)))
    stop.set()
    await beat
    expected = state.snapshot()
    token = state.token
    state.close()
    assert ticks > 20  # the loop kept running while merges waited for the disk
    again = place.open()
    assert again.snapshot() == expected
    assert again.token == token
    assert again.get("results") == {f"a{i}": 9 for i in range(20)}
    assert len(again.get("log")) == 200
    again.close()


async def test_async_apply_update_is_durable(stores: Any) -> None:
    source = SharedState()
    source.commit({"a": {"b": 1}, "l": [1, 2]}, source.token, "src")
    place = stores.fresh()
    replica = place.open()
    result = await replica.aapply_update(source.get_update(), origin="peer")
    assert set(result.applied) == {("a",), ("l",)}
    replica.close()
    again = place.open()
    assert again.snapshot() == {"a": {"b": 1}, "l": [1, 2]}
    again.close()


async def test_on_durable_calls_back_at_once_when_already_durable(stores: Any) -> None:
    state = stores.fresh().open()
    store = state.store
    assert store is not None
    seen: list[BaseException | None] = []
    await state.acommit({"x": 1}, state.token, "a")
    store.on_durable(1, seen.append)  # already durable: called at once
    assert seen == [None]
    state.close()


def test_request_ids_make_commits_idempotent_across_reopen(stores: Any) -> None:
    place = stores.fresh()
    state = place.open()
    base = state.token
    first = state.commit([Change("append", ("log",), ["once"])], base, "a", request_id=42)
    again = state.commit([Change("append", ("log",), ["once"])], base, "a", request_id=42)
    assert again.token == first.token and again.applied == first.applied
    assert state.get("log") == ["once"]
    token = state.token
    state.close()
    reopened = place.open()
    third = reopened.commit([Change("append", ("log",), ["once"])], base, "a", request_id=42)
    assert third.token == token
    assert reopened.get("log") == ["once"]
    other = reopened.commit([Change("append", ("log",), ["twice"])], base, "a", request_id=43)
    assert other.applied == (("log",),)
    assert reopened.get("log") == ["once", "twice"]
    reopened.close()


def test_request_ids_in_memory() -> None:
    state = SharedState()
    base = state.token
    state.commit({"n": 1}, base, "a", request_id=7)
    state.commit({"m": 1}, state.token, "b")
    repeat = state.commit({"n": 2}, base, "a", request_id=7)  # same id: not applied again
    assert repeat.applied == (("n",),)
    assert state.snapshot() == {"n": 1, "m": 1}


def test_when_durable_waits_for_every_change_made_so_far(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_memory: list[BaseException | None] = []
    SharedState().when_durable(in_memory.append)
    assert in_memory == [None]  # nothing to wait for: at once
    disk = threading.Event()
    commit = stores.store_class._write

    def gated(self: Any, batch: Any) -> None:
        disk.wait(10)
        commit(self, batch)

    monkeypatch.setattr(stores.store_class, "_write", gated)
    place = stores.fresh()
    state = place.open()
    nothing_yet: list[BaseException | None] = []
    state.when_durable(nothing_yet.append)
    assert nothing_yet == [None]  # no change made yet
    source = SharedState()
    source.commit({"y": 2}, source.token, "peer")
    writers = [  # each waits for the disk, in its own thread
        threading.Thread(target=state.commit, args=({"x": 1}, state.token, "a")),
        threading.Thread(target=state.apply_update, args=(source.get_update(),)),
    ]
    for thread in writers:
        thread.start()
    deadline = time.monotonic() + 5
    while state.snapshot() != {"x": 1, "y": 2} and time.monotonic() < deadline:
        time.sleep(0.005)
    calls: list[tuple[BaseException | None, int]] = []
    state.when_durable(lambda error: calls.append((error, threading.get_ident())))
    time.sleep(0.1)
    assert calls == []  # both changes are still in memory only
    disk.set()
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.005)
    assert calls and calls[0][0] is None
    assert calls[0][1] != threading.get_ident()  # told from the writer thread
    for thread in writers:
        thread.join()
    state.close()
    with place.open() as again:
        assert again.snapshot() == {"x": 1, "y": 2}


def test_when_durable_reports_changes_that_will_never_be_stored(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, batch: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(stores.store_class, "_write", broken)
    state = stores.fresh().open()
    with pytest.raises(StorageError) as info:
        state.commit({"x": 1}, state.token, "a")  # in memory, never in the store
    assert isinstance(info.value.__cause__, OSError)  # the original error is chained
    told: list[BaseException | None] = []
    state.when_durable(told.append)
    assert len(told) == 1 and isinstance(told[0], StorageError)
    state.close()


async def test_settle_on_loop_settles_from_another_thread_once() -> None:
    loop = asyncio.get_running_loop()
    ok, failed, cancelled = loop.create_future(), loop.create_future(), loop.create_future()
    cancelled.cancel()
    boom = StorageError("disk gone")
    troubles: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: troubles.append(context))

    def store_thread() -> None:
        settle_on_loop(ok)(None)
        settle_on_loop(ok)(boom)  # already settled: ignored
        settle_on_loop(failed)(boom)
        settle_on_loop(cancelled)(None)  # already done: no InvalidStateError

    worker = threading.Thread(target=store_thread)
    worker.start()
    worker.join()
    assert await asyncio.wait_for(ok, 5) is None
    with pytest.raises(StorageError, match="disk gone"):
        await asyncio.wait_for(failed, 5)
    await asyncio.sleep(0.01)  # the last callback runs
    assert cancelled.cancelled()
    assert troubles == []  # no callback raised (InvalidStateError) on the loop
