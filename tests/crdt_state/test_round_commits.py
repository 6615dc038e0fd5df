"""Group commits written in rounds: one writer thread for the batches of many queues.

A fake writer (the test runs its rounds) checks the rules of
``crdt_state._group_rounds.RoundCommit``: each queue's batches in order, one part per
queue and round, a failed part fails its queue alone, no durability callback runs before
every queue of the round is ended (a callback may close another queue of the round), a
queue closing from its own callback raises, a compaction leaves the round's thread.
Then the real thing: PostgreSQL stores on one ``SharedWriter`` have no thread of
their own, keep their order and fail alone; and ``settle_on_loop`` wakes the event loop
once for a burst of outcomes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

from crdt_state import SharedState, StorageError, _pg_shared, _writer_pool
from crdt_state._group_rounds import RoundCommit
from crdt_state.journal import DurableCallback, call_on_loop, settle_on_loop
from crdt_state.postgres import Recorded, SharedWriter, open_postgres


class FakeRounds:
    """A writer whose rounds the test runs: the parts of a round are committed at once."""

    def __init__(self) -> None:
        self.ready: list[RoundCommit[int]] = []
        self.committed: dict[str, list[list[int]]] = {}
        self.refuse: set[str] = set()
        self.rounds: list[list[str]] = []

    def submit(self, queue: RoundCommit[Any]) -> None:
        self.ready.append(queue)

    def commit_alone(self, part: Any) -> BaseException | None:
        return self._commit([part])[0]

    def _commit(self, parts: list[tuple[str, list[int]]]) -> list[BaseException | None]:
        self.rounds.append([name for name, _ in parts])
        errors: list[BaseException | None] = []
        for name, items in parts:
            if name in self.refuse:
                errors.append(StorageError(f"{name} refused"))
            else:
                self.committed.setdefault(name, []).append(items)
                errors.append(None)
        return errors

    def run_round(self) -> None:
        """One round, on a writer thread of its own (as the shared writer's)."""
        failed: list[BaseException] = []

        def run() -> None:
            _writer_pool.as_writer_thread()
            try:
                self._round()
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(10)
        assert not thread.is_alive() and not failed

    def _round(self) -> None:
        queues, self.ready = self.ready, []
        staged = [s for q in queues if (s := q.begin_round()) is not None]
        errors = self._commit([s.part for s in staged])
        for s, error in zip(staged, errors, strict=True):
            s.queue.end_round(s, error)
        for q in queues:
            q.fire_durable()


def stage_of(name: str) -> Any:
    def stage(batch: list[tuple[int, int]]) -> Generator[Any, BaseException | None, None]:
        error = yield (name, [item for _, item in batch])
        if error is not None:
            raise error

    return stage


def queue(rounds: FakeRounds, name: str, due: bool = False) -> RoundCommit[int]:
    return RoundCommit[int](name, rounds, stage_of(name), lambda: None, lambda: due, off=False)


def test_one_round_takes_a_batch_of_every_queue_in_order() -> None:
    rounds = FakeRounds()
    queues = [queue(rounds, f"q{i}") for i in range(3)]
    told: list[tuple[str, int]] = []
    for n in range(4):
        for q in queues:
            ticket = q.enqueue(n)

            def note(e: BaseException | None, q: RoundCommit[int] = q, t: int = ticket) -> None:
                told.append((q.file, t))

            q.on_durable(ticket, note)
    assert len(rounds.ready) == 3  # each queue handed in once, however many items
    assert told == []  # nothing durable before a round
    rounds.run_round()
    assert rounds.rounds == [["q0", "q1", "q2"]]
    assert rounds.committed == {f"q{i}": [[0, 1, 2, 3]] for i in range(3)}
    assert sorted(told) == sorted((f"q{i}", t) for i in range(3) for t in range(1, 5))
    queues[1].enqueue(9)
    rounds.run_round()
    assert rounds.committed["q1"] == [[0, 1, 2, 3], [9]]
    for q in queues:
        assert q.close()


def test_a_refused_part_fails_its_queue_alone() -> None:
    rounds = FakeRounds()
    good, bad = queue(rounds, "good"), queue(rounds, "bad")
    rounds.refuse.add("bad")
    outcomes: dict[str, BaseException | None] = {}
    for q in (good, bad):

        def note(e: BaseException | None, q: RoundCommit[int] = q) -> None:
            outcomes.__setitem__(q.file, e)

        q.on_durable(q.enqueue(1), note)
    rounds.run_round()
    assert outcomes["good"] is None
    assert isinstance(outcomes["bad"], StorageError)
    with pytest.raises(StorageError):
        bad.enqueue(2)
    good.enqueue(2)
    rounds.run_round()
    assert rounds.committed == {"good": [[1], [2]]}
    assert good.close() and bad.close()


def test_callbacks_run_after_every_queue_of_the_round_ended() -> None:
    """A callback closes another queue of the same round (which has more queued): no
    deadlock, its rest goes in a round of its own; closing its own queue raises."""
    rounds = FakeRounds()
    first, second = queue(rounds, "first"), queue(rounds, "second")
    raised: list[BaseException] = []

    def close_both(error: BaseException | None) -> None:
        second.enqueue(7)  # queued after the round took the batch
        assert second.close()
        try:
            first.close()
        except RuntimeError as exc:
            raised.append(exc)

    first.on_durable(first.enqueue(1), close_both)
    second.enqueue(2)
    rounds.run_round()
    assert rounds.committed == {"first": [[1]], "second": [[2], [7]]}
    assert rounds.rounds == [["first", "second"], ["second"]]
    assert len(raised) == 1 and not first.closed
    assert first.close()


def test_a_due_compaction_runs_off_the_round_thread() -> None:
    rounds = FakeRounds()
    ran: list[str] = []
    done = threading.Event()

    def after() -> None:
        ran.append(threading.current_thread().name)
        done.set()

    q = RoundCommit[int]("c", rounds, stage_of("c"), after, lambda: True, off=False)
    q.enqueue(1)
    rounds.run_round()
    assert done.wait(10)
    q.flush()  # settled once the compaction ran
    assert ran == ["crdt-state-writer"]
    q.enqueue(2)  # submitted again once the compaction let the queue go
    rounds.run_round()
    assert rounds.committed == {"c": [[1], [2]]}
    assert q.close()


def test_stores_on_a_shared_writer_have_no_thread_of_their_own(throwaway_postgres: str) -> None:
    writer = SharedWriter(throwaway_postgres)
    rooms = [f"rounds-{n}" for n in range(6)]
    before = set(threading.enumerate())
    states = [open_postgres(throwaway_postgres, room, writer=writer) for room in rooms]
    try:

        def edit(state: SharedState, n: int) -> None:
            for i in range(30):  # the last one waits till all are durable
                state.commit({"n": n, "i": i}, state.token, f"agent{n}", wait=i == 29)

        threads = [threading.Thread(target=edit, args=(s, n)) for n, s in enumerate(states)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        started = [t.name for t in set(threading.enumerate()) - before]
        assert started.count("crdt-state-pg-writer") == 1
        assert writer.parts >= len(rooms) and writer.rounds < 6 * 30  # batches shared rounds
    finally:
        for state in states:
            state.close()
        writer.close()
    for n, room in enumerate(rooms):
        again = open_postgres(throwaway_postgres, room)
        try:
            assert again.snapshot() == {"n": n, "i": 29}
            assert len(again.history()) == 30
        finally:
            again.close()


class CountedWriter(SharedWriter):
    """A shared writer that keeps each thread it ran on."""

    def __init__(self, dsn: str) -> None:
        self.threads: list[threading.Thread] = []
        super().__init__(dsn)

    def _run(self) -> None:
        self.threads.append(threading.current_thread())
        super()._run()


def test_an_idle_writer_thread_ends_and_the_next_batch_starts_one(
    throwaway_postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer nobody closes keeps no thread (nor, through it, itself) for ever."""
    monkeypatch.setattr(_pg_shared, "IDLE_SECONDS", 0.2)
    writer = CountedWriter(throwaway_postgres)
    state = open_postgres(throwaway_postgres, "rounds-idle", writer=writer)
    try:
        for n in range(2):
            state.commit({"n": n}, state.token, "w")
            assert len(writer.threads) == n + 1  # a thread for this batch
            writer.threads[-1].join(10)  # it ends on its own
            assert not writer.threads[-1].is_alive()
        assert writer.rounds == 2
    finally:
        state.close()
        writer.close()
    again = open_postgres(throwaway_postgres, "rounds-idle")
    try:
        assert again.snapshot() == {"n": 1}
    finally:
        again.close()


def test_a_raising_callback_stops_neither_the_writer_nor_the_other_callbacks(
    throwaway_postgres: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = SharedWriter(throwaway_postgres)
    states = [open_postgres(throwaway_postgres, f"rounds-raise-{n}", writer=writer) for n in (0, 1)]
    told: list[tuple[int, BaseException | None]] = []
    done = threading.Event()

    def boom(error: BaseException | None) -> None:
        raise ValueError("a callback's bug")

    def record(n: int) -> DurableCallback:
        def told_of(error: BaseException | None) -> None:
            told.append((n, error))
            if len(told) == 3:
                done.set()

        return told_of

    sleepy = Recorded()  # a round that holds the writer while the callbacks are set up
    sleepy.execute("SELECT pg_sleep(0.5)")
    busy = threading.Thread(target=writer.commit, args=(sleepy, None, 0, "sleep"))
    try:
        busy.start()
        deadline = time.monotonic() + 10
        while writer.rounds == 0:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        for n, state in enumerate(states):
            state.commit({"n": n}, state.token, "w", wait=False)
        states[0].when_durable(boom)
        states[0].when_durable(record(0))  # the same store's next callback still runs
        states[1].when_durable(record(1))
        states[1].when_durable(record(2))
        assert done.wait(10)
        assert sorted(told) == [(0, None), (1, None), (2, None)]
        for state in states:  # the writer still writes
            state.commit({"again": True}, state.token, "w")
        assert "a callback's bug" in caplog.text
    finally:
        busy.join(10)
        for state in states:
            state.close()
        writer.close()


def test_a_store_on_a_closed_writer_fails_alone(throwaway_postgres: str) -> None:
    writer = SharedWriter(throwaway_postgres)
    state = open_postgres(throwaway_postgres, "rounds-closed", writer=writer)
    try:
        state.commit({"a": 1}, state.token, "w")
        writer.close()
        with pytest.raises(StorageError):
            state.commit({"a": 2}, state.token, "w")  # refused: nothing of it is stored
    finally:
        state.close()
    again = open_postgres(throwaway_postgres, "rounds-closed")
    try:
        assert again.snapshot() == {"a": 1}
    finally:
        again.close()


async def test_a_burst_of_outcomes_wakes_the_loop_once() -> None:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(50)]
    callbacks = [settle_on_loop(f) for f in futures]
    woken = 0
    wake = loop.call_soon_threadsafe

    def counted(*args: Any) -> Any:
        nonlocal woken
        woken += 1
        return wake(*args)

    loop.call_soon_threadsafe = counted  # type: ignore[assignment]  # a counting wrapper
    try:
        error = StorageError("lost")
        burst = threading.Thread(
            target=lambda: [cb(error if n == 7 else None) for n, cb in enumerate(callbacks)]
        )
        burst.start()
        burst.join(10)  # the loop runs nothing meanwhile: one wake for all fifty
        assert woken == 1
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        assert outcomes[7] is error and outcomes.count(None) == 49
        callbacks[0](None)  # settled already: left as it is, one more wake
        await asyncio.sleep(0)
        assert woken == 2
    finally:
        del loop.call_soon_threadsafe


def test_calls_on_a_loop_run_in_order_and_one_failing_stops_none() -> None:
    loop = asyncio.new_event_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))
    ran: list[int] = []

    def record(n: int) -> None:
        if n == 2:
            raise ValueError("two")
        ran.append(n)

    try:

        def call_all() -> None:
            for n in range(5):
                call_on_loop(loop, record, n)

        thread = threading.Thread(target=call_all)
        thread.start()
        thread.join(10)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert ran == [0, 1, 3, 4]
        assert [str(e) for e in reported] == ["two"]
    finally:
        loop.close()
    with pytest.raises(RuntimeError):
        call_on_loop(loop, record, 9)
    with pytest.raises(RuntimeError):  # and again: nothing was kept waiting
        call_on_loop(loop, record, 9)
