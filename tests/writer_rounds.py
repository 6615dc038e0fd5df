"""Test helpers for a shared PostgreSQL writer's rounds (``crdt_state._pg_shared``).

A test holds the writer busy in a round of its own (waiting for an advisory lock the
test holds) while it hands batches in, so that they share the next round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import psycopg

from crdt_state import SharedState
from crdt_state._pg_shared import Recorded, SharedWriter


def durability_told(state: SharedState) -> list[BaseException | None]:
    """What ``state.when_durable`` reports for everything changed so far (waits for it)."""
    told: list[BaseException | None] = []
    done = threading.Event()

    def record(error: BaseException | None) -> None:
        told.append(error)
        done.set()

    state.when_durable(record)
    assert done.wait(10), "durability was never reported"
    return told


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait up to 10 s for ``condition``; fail the test with ``what`` otherwise."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@contextmanager
def held_writer(writer: SharedWriter, dsn: str, lock: int) -> Iterator[threading.Thread]:
    """The writer busy in a round of its own until the block ends (that round commits).

    The round waits for the advisory lock ``lock``, which the block holds.
    """
    rounds = writer.rounds
    gate = psycopg.connect(dsn, autocommit=True)
    gate.execute("SELECT pg_advisory_lock(%s)", (lock,))
    waits = Recorded()
    waits.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
    busy = threading.Thread(target=writer.commit, args=(waits, None, 0, "gate"))
    busy.start()
    try:
        until(lambda: writer.rounds > rounds, "the writer never took the busy round")
        yield busy
    finally:
        gate.close()  # the lock goes with the session
        busy.join(10)


def in_one_round(
    writer: SharedWriter, dsn: str, lock: int, sends: Sequence[Callable[[], object]]
) -> None:
    """Run ``sends`` (each hands one batch in, perhaps on a thread) in one round.

    The writer is held in a round (advisory ``lock``) while every batch is handed in,
    then let go; returns once the round that took them all has run.
    """
    rounds = writer.rounds
    with held_writer(writer, dsn, lock):
        for send in sends:
            send()
        until(lambda: writer.waiting >= len(sends), "the batches were not handed in")
    until(lambda: writer.rounds >= rounds + 2, "the round never ran")
