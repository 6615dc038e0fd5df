"""Group commits sharing the process's writer threads, and multi-row inserts.

Every queue (a durable state's store) writes on a few shared threads
(``crdt_state._writer_pool``): each queue's batches stay in order, a failed
write fails that queue only, a slow write holds up no other queue, closing one
queue while others write flushes it alone, and a queue can be closed from a
durability callback (on a writer thread). ``insert_rows`` (one statement for
many rows) stores exactly what ``executemany`` (a statement per row) stores.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt_state import SharedState, StorageError
from crdt_state._group_commit import GroupCommit
from crdt_state._sqlite_batch import prepare_batch_rows
from crdt_state._sqlite_file import _SCHEMA
from crdt_state._sqlite_log import ROWS_PER_STATEMENT, insert_rows
from crdt_state._sqlite_writes import write_batch
from crdt_state.conflicts import StateUpdate
from crdt_state.version import VersionVector


class Target:
    """A queue's ``write``: records batches; can fail, or hold until released."""

    def __init__(self, name: str, fail_at: int | None = None) -> None:
        self.name = name
        self.fail_at = fail_at
        self.batches: list[list[tuple[int, int]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.threads: set[str] = set()

    def write(self, batch: list[tuple[int, int]]) -> None:
        self.entered.set()
        assert self.gate.wait(10)
        self.threads.add(threading.current_thread().name)
        if self.fail_at is not None and any(t >= self.fail_at for t, _ in batch):
            raise OSError(f"{self.name}: disk full")
        self.batches.append(batch)

    def items(self) -> list[int]:
        return [item for batch in self.batches for _, item in batch]


def queue_of(target: Target) -> GroupCommit[int]:
    return GroupCommit[int](target.name, target.write, lambda: None, off=False)


def test_queues_keep_their_order_and_callbacks_on_shared_threads() -> None:
    targets = [Target(f"room{i}") for i in range(12)]
    queues = [queue_of(t) for t in targets]
    told: dict[int, list[tuple[int, BaseException | None]]] = {i: [] for i in range(12)}
    lock = threading.Lock()

    def callback(i: int, ticket: int):  # type: ignore[no-untyped-def]
        def done(error: BaseException | None) -> None:
            with lock:
                told[i].append((ticket, error))

        return done

    for n in range(200):
        for i, q in enumerate(queues):
            ticket = q.enqueue(n)
            if n % 7 == 0:
                q.on_durable(ticket, callback(i, ticket))
    for q in queues:
        q.flush()
    for i, (t, q) in enumerate(zip(targets, queues, strict=True)):
        assert t.items() == list(range(200))  # every item, once, in order
        tickets = [ticket for batch in t.batches for ticket, _ in batch]
        assert tickets == list(range(1, 201))
        assert told[i] == [(ticket, None) for ticket in range(1, 201, 7)]  # in ticket order
        assert all(name == "crdt-state-writer" for name in t.threads)
        assert q.close()


def test_a_failed_write_fails_its_queue_only() -> None:
    broken, sound = Target("broken", fail_at=3), Target("sound")
    bq, sq = queue_of(broken), queue_of(sound)
    errors: list[BaseException | None] = []
    for n in range(1, 6):
        bq.enqueue(n)
        sq.enqueue(n)
        bq.flush() if n < 3 else None
    with pytest.raises(StorageError) as failure:
        bq.flush()
    assert isinstance(failure.value.__cause__, OSError)
    # the message says why and what to do, not only the details
    assert "broken: disk full" in str(failure.value), failure.value
    assert "takes no more writes: open the state again" in str(failure.value)
    with pytest.raises(StorageError, match="failed earlier") as later:
        bq.enqueue(6)  # every later write of that queue fails
    assert "broken: disk full" in str(later.value) and later.value.details["cause"]
    bq.on_durable(5, errors.append)
    assert len(errors) == 1 and isinstance(errors[0], StorageError)
    for n in range(6, 40):  # the other queue goes on
        sq.enqueue(n)
    sq.flush()
    assert sound.items() == list(range(1, 40))
    assert broken.items() == [1, 2]
    assert bq.close() and sq.close()


def test_a_slow_write_holds_up_no_other_queue() -> None:
    slow, quick = Target("slow"), Target("quick")
    slow.gate.clear()
    sq, qq = queue_of(slow), queue_of(quick)
    try:
        sq.enqueue(1)
        assert slow.entered.wait(10)  # a writer thread is held inside the slow write
        for n in range(50):
            qq.enqueue(n)
        qq.flush()  # written meanwhile, by another writer thread
        assert quick.items() == list(range(50))
        assert slow.items() == []
    finally:
        slow.gate.set()
    sq.flush()
    assert slow.items() == [1]
    assert sq.close() and qq.close()


def test_closing_one_queue_while_others_write_flushes_it_alone() -> None:
    targets = [Target(f"busy{i}") for i in range(4)]
    queues = [queue_of(t) for t in targets]
    stop = threading.Event()

    def keep_writing(q: GroupCommit[int]) -> None:
        n = 0
        while not stop.is_set():
            q.enqueue(n)
            n += 1
            time.sleep(0.0005)

    writers = [threading.Thread(target=keep_writing, args=(q,)) for q in queues[1:]]
    for w in writers:
        w.start()
    closing, target = queues[0], targets[0]
    pending: list[BaseException | None] = []
    for n in range(300):
        closing.enqueue(n)
    closing.on_durable(300, pending.append)
    assert closing.close()  # returns once all it queued is written
    assert target.items() == list(range(300))
    assert pending == [None]
    assert not closing.close()
    with pytest.raises(StorageError, match="closed"):
        closing.enqueue(301)
    stop.set()
    for w in writers:
        w.join()
    for t, q in zip(targets[1:], queues[1:], strict=True):
        q.flush()
        assert t.items() == list(range(len(t.items())))
        assert q.close()


def test_a_queue_closes_from_a_durability_callback() -> None:
    """On a writer thread, closing writes the rest there (no wait for a turn of the threads)."""
    first, second = Target("first"), Target("second")
    fq, sq = queue_of(first), queue_of(second)
    closed = threading.Event()

    def close_second(error: BaseException | None) -> None:
        assert error is None
        for n in range(10):
            sq.enqueue(n)
        sq.close()
        closed.set()

    fq.on_durable(fq.enqueue(0), close_second)
    assert closed.wait(10)
    assert second.items() == list(range(10))
    fq.enqueue(1)
    fq.flush()
    assert first.items() == [0, 1]
    assert fq.close()


def test_durable_states_on_shared_writers_fail_alone(tmp_path: Path) -> None:
    states = [SharedState.open(tmp_path / f"r{i}.sqlite") for i in range(3)]
    try:
        store = states[0].store
        assert store is not None

        def broken(batch: object) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        store._commits._write = broken  # type: ignore[attr-defined]  # the disk fails
        with pytest.raises(StorageError):
            states[0].commit({"x": 1}, states[0].token, "a")
        with pytest.raises(StorageError):
            states[0].commit({"x": 2}, states[0].token, "a")
        for n in range(20):
            for s in states[1:]:
                s.commit({"n": n}, s.token, "a", wait=n % 3 == 0)
        for s in states[1:]:
            assert s.store is not None
            s.store.flush()
            assert [e.seq for e in s.store.history()][-1] == s.position
    finally:
        for s in states:
            s.close()
    for i in (1, 2):
        reopened = SharedState.open(tmp_path / f"r{i}.sqlite")
        try:
            assert reopened.get("n") == 19
        finally:
            reopened.close()


_KEYS = st.sampled_from(["a", "b", "c", "d"])
_ROWS = st.lists(
    st.tuples(
        _KEYS, st.integers(-5, 5), st.one_of(st.none(), st.text(max_size=3)), st.binary(max_size=4)
    ),
    max_size=3 * ROWS_PER_STATEMENT + 5,
)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(_ROWS, max_size=4))
def test_insert_rows_stores_what_executemany_stores(
    batches: list[list[tuple[object, ...]]],
) -> None:
    """Same rows, same order, same winners of ``OR REPLACE``, for any count of rows."""
    tables = []
    for fast in (True, False):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER, s TEXT, b BLOB)")
        conn.execute("CREATE TABLE log (k TEXT, n INTEGER, s TEXT, b BLOB)")
        for rows in batches:
            if fast:
                insert_rows(conn, "INSERT OR REPLACE INTO t (k, n, s, b)", rows)
                insert_rows(conn, "INSERT INTO log (k, n, s, b)", rows)
            else:
                conn.executemany("INSERT OR REPLACE INTO t (k, n, s, b) VALUES (?, ?, ?, ?)", rows)
                conn.executemany("INSERT INTO log (k, n, s, b) VALUES (?, ?, ?, ?)", rows)
        tables.append(
            (
                conn.execute("SELECT * FROM t ORDER BY k").fetchall(),
                conn.execute("SELECT rowid, * FROM log ORDER BY rowid").fetchall(),
            )
        )
        conn.close()
    assert tables[0] == tables[1]


_PATHS = st.lists(st.tuples(st.sampled_from(["x", "y", "z"])), min_size=1, max_size=3, unique=True)


@st.composite
def _batches(draw: st.DrawFn) -> list[list[StateUpdate]]:
    """Batches of consecutive changes: shared paths, request ids or none, now and then
    more rows than one statement takes."""
    seq, out = 0, []
    for _ in range(draw(st.integers(1, 4))):
        batch = []
        for _ in range(draw(st.sampled_from([1, 2, 5, 50]))):
            seq += 1
            batch.append(
                StateUpdate(
                    seq=seq,
                    update=draw(st.binary(min_size=1, max_size=6)),
                    token=VersionVector({7: seq, 9: draw(st.integers(0, 3))}),
                    agent=draw(st.one_of(st.none(), st.sampled_from(["a", "b"]))),
                    paths=tuple(tuple(p) for p in draw(_PATHS)),
                    origin=draw(st.sampled_from(["local", "remote"])),
                    time=draw(st.floats(0, 2e9, allow_nan=False)),
                    request_id=draw(st.one_of(st.none(), st.integers(1, 5))),
                    writer=draw(st.one_of(st.none(), st.sampled_from(["w", "v"]))),
                )
            )
        out.append(batch)
    return out


@settings(max_examples=60, deadline=None)
@given(batches=_batches())
def test_a_batch_at_once_stores_what_the_transaction_stores(
    batches: list[list[StateUpdate]],
) -> None:
    """``write_batch(at_once=True)`` (one statement through the batch view) equals the
    general path: the same rows in every table, rowids included (blame has none), the same
    ``Written``."""
    dumps = []
    for at_once in (True, False):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        for statement in _SCHEMA:
            conn.execute(statement)
        if at_once:
            prepare_batch_rows(conn)
        last_seq = log_rows = 0
        results = []
        for batch in batches:
            written = write_batch(conn, batch, last_seq, log_rows, "f", at_once=at_once)
            last_seq, log_rows = written.last_seq, written.log_rows
            results.append(written)
        queries = [
            f"SELECT rowid, * FROM {t} ORDER BY rowid"
            for t in ("log", "writer_requests", "conflicts")
        ]
        queries.append("SELECT * FROM blame ORDER BY path")  # WITHOUT ROWID: keyed by path
        dumps.append((results, [conn.execute(query).fetchall() for query in queries]))
        conn.close()
    assert dumps[0] == dumps[1]


def test_a_batch_at_once_is_refused_whole(tmp_path: Path) -> None:
    """A change out of sequence or a row the file refuses: nothing of the batch is stored."""
    conn = sqlite3.connect(tmp_path / "f.sqlite", isolation_level=None)
    for statement in _SCHEMA:
        conn.execute(statement)
    prepare_batch_rows(conn)

    def change(seq: int) -> StateUpdate:
        return StateUpdate(
            seq, b"u", VersionVector({1: seq}), "a", (("x",),), "local", 1.0, (), 1, "w"
        )

    write_batch(conn, [change(1), change(2)], 0, 0, "f", at_once=True)
    with pytest.raises(StorageError, match="disagree"):
        write_batch(conn, [change(4)], 2, 2, "f", at_once=True)
    with pytest.raises(sqlite3.IntegrityError):  # seq 2 is stored already: the log refuses
        write_batch(conn, [change(2), change(3)], 1, 1, "f", at_once=True)
    assert conn.execute("SELECT seq FROM log").fetchall() == [(1,), (2,)]
    assert not conn.in_transaction
    conn.close()


def test_a_queue_cannot_close_from_its_own_durability_callback() -> None:
    """Its batch is being written on that very thread: closing raises, nothing is lost."""
    target = Target("self")
    q = queue_of(target)
    raised: list[BaseException] = []
    told = threading.Event()

    def close_itself(error: BaseException | None) -> None:
        try:
            q.close()
        except RuntimeError as exc:
            raised.append(exc)
        told.set()

    q.on_durable(q.enqueue(0), close_itself)
    assert told.wait(10)
    assert len(raised) == 1 and not q.closed
    q.enqueue(1)
    assert q.close()
    assert target.items() == [0, 1]


def test_a_queue_of_its_own_writes_in_order_and_its_thread_ends_on_close() -> None:
    """``shared=False`` (PostgreSQL stores, whose shared writer batches the rooms that wait
    in it at once): one thread for the queue, gone once it is closed."""
    target = Target("own")
    before = set(threading.enumerate())
    q = GroupCommit[int](target.name, target.write, lambda: None, off=False, shared=False)
    for n in range(100):
        q.enqueue(n)
    q.flush()
    started = set(threading.enumerate()) - before
    assert len(started) <= 1
    assert q.close()
    assert target.items() == list(range(100))
    for thread in started:
        thread.join(10)
        assert not thread.is_alive()
