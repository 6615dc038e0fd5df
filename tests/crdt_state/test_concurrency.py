"""Many agents in threads and asyncio tasks against one SharedState: nothing lost."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from crdt_state import (
    Branch,
    ConflictError,
    CrdtStateError,
    Retry,
    RetryExhausted,
    SharedState,
    resolvers,
)

THREADS = 50
CYCLES = 20


def test_threads_fork_merge_lose_nothing() -> None:
    state = SharedState(resolvers={"counter": resolvers.counter})
    state.commit({"counter": 0}, state.token, "init")
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []
    conflicts_seen = [0] * THREADS

    def worker(t: int) -> None:
        try:
            start.wait()
            for c in range(CYCLES):
                branch = state.fork(f"thread{t}")
                branch.set(("fields", f"t{t}", f"c{c}"), t * 1000 + c)
                branch.set("counter", branch.get("counter") + 1)
                time.sleep(0)  # let other threads merge between this fork and its merge
                result = branch.merge()
                conflicts_seen[t] += len(result.conflicts)
                assert all(conflict.path == ("counter",) for conflict in result.conflicts)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert sum(conflicts_seen) > 0  # the threads really interleaved
    snapshot = state.snapshot()
    assert snapshot["counter"] == THREADS * CYCLES
    assert type(snapshot["counter"]) is int
    assert snapshot["fields"] == {
        f"t{t}": {f"c{c}": t * 1000 + c for c in range(CYCLES)} for t in range(THREADS)
    }


def test_asyncio_tasks_lose_nothing() -> None:
    asyncio.run(_asyncio_tasks())


async def _asyncio_tasks() -> None:
    state = SharedState(resolvers={"calls": resolvers.counter, "log": resolvers.union})
    rng = random.Random(1234)
    delays = [rng.uniform(0, 0.005) for _ in range(1000)]

    async def agent(i: int) -> None:
        async with state.fork(f"task{i}") as branch:
            await asyncio.sleep(delays[i])
            branch.set(("results", f"r{i}"), {"agent": i, "ok": True})
            branch.set("calls", branch.get("calls", 0) + 1)
            branch.append("log", i)

    async def step(branch: Branch, i: int) -> int:
        await asyncio.sleep(delays[500 + i])
        branch.set(("steps", f"s{i}"), i)
        branch.set("calls", branch.get("calls", 0) + 1)
        return i

    async def transacting(i: int) -> None:
        result = await state.atransact(lambda b: step(b, i), agent=f"tx{i}")
        assert result.value == i

    await asyncio.gather(*(agent(i) for i in range(500)), *(transacting(i) for i in range(100)))
    snapshot = state.snapshot()
    assert snapshot["results"] == {f"r{i}": {"agent": i, "ok": True} for i in range(500)}
    assert snapshot["steps"] == {f"s{i}": i for i in range(100)}
    assert snapshot["calls"] == 600
    assert sorted(snapshot["log"]) == list(range(500))


def test_transact_retry_reruns_until_success() -> None:
    state = SharedState(resolvers={"owner": resolvers.retry})
    state.commit({"owner": "nobody"}, state.token, "init")
    runs: list[str] = []

    def step(branch: Branch) -> str:
        runs.append(branch.get("owner"))
        if len(runs) < 3:  # someone else writes the same field meanwhile
            state.commit({"owner": f"rival{len(runs)}"}, state.token, "rival")
        branch.set("owner", "me")
        return "done"

    result = state.transact(step, agent="me", retry=Retry(attempts=5, base_delay=0.0))
    assert result.attempts == 3
    assert result.value == "done"
    assert runs == ["nobody", "rival1", "rival2"]  # each re-run saw fresh state
    assert state.get("owner") == "me"


def test_atransact_retry_reruns_until_success() -> None:
    asyncio.run(_atransact_retry())


async def _atransact_retry() -> None:
    state = SharedState(resolvers={"owner": resolvers.retry})
    state.commit({"owner": "nobody"}, state.token, "init")
    runs = 0

    async def step(branch: Branch) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            state.commit({"owner": "rival"}, state.token, "rival")
        await asyncio.sleep(0)
        branch.set("owner", "me")

    result = await state.atransact(step, agent="me", retry=Retry(attempts=3, base_delay=0.0))
    assert result.attempts == 2
    assert state.get("owner") == "me"


@pytest.mark.parametrize("attempts", [1, 2, 4])
def test_retry_exhausted_carries_conflicts(attempts: int) -> None:
    state = SharedState(resolvers={"owner": resolvers.retry})
    state.commit({"owner": "nobody"}, state.token, "init")
    runs = 0

    def step(branch: Branch) -> None:
        nonlocal runs
        runs += 1
        state.commit({"owner": f"rival{runs}"}, state.token, "rival")
        branch.set("owner", "me")

    with pytest.raises(RetryExhausted) as info:
        state.transact(step, agent="me", retry=Retry(attempts=attempts, base_delay=0.0))
    error = info.value
    assert runs == attempts
    assert error.attempts == attempts
    assert error.code == "retry_exhausted"
    assert isinstance(error, ConflictError) and isinstance(error, CrdtStateError)
    assert [c.path for c in error.conflicts] == [("owner",)]
    conflict = error.conflicts[0]
    assert (conflict.current, conflict.incoming) == (f"rival{attempts}", "me")
    assert conflict.incoming_agent == "me" and conflict.current_agent == "rival"
    assert state.get("owner") == f"rival{attempts}"  # nothing of "me" applied


def test_transact_does_not_retry_a_refused_conflict() -> None:
    state = SharedState()  # default raise_conflict
    state.commit({"owner": "nobody"}, state.token, "init")
    runs = 0

    def step(branch: Branch) -> None:
        nonlocal runs
        runs += 1
        state.commit({"owner": "rival"}, state.token, "rival")
        branch.set("owner", "me")

    with pytest.raises(ConflictError) as info:
        state.transact(step, agent="me", retry=Retry(attempts=5, base_delay=0.0))
    assert not isinstance(info.value, RetryExhausted)
    assert runs == 1


def test_jitter_within_cap() -> None:
    policy = Retry(attempts=10, base_delay=0.01, max_delay=0.5, rng=random.Random(7))
    for attempt in range(1, 40):
        cap = policy.cap(attempt)
        assert cap == min(0.5, 0.01 * 2 ** (attempt - 1))
        samples = [policy.delay(attempt) for _ in range(50)]
        assert all(0.0 <= d <= cap for d in samples)
        if cap > 0:
            assert len(set(samples)) > 1  # jittered, not a constant
    assert Retry(base_delay=0.0, rng=random.Random(1)).delay(3) == 0.0
    for bad in ({"attempts": 0}, {"base_delay": -1.0}, {"max_delay": -0.1}):
        with pytest.raises(ValueError):
            Retry(**bad)


def test_transact_sleeps_are_jittered_within_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    # by its dotted name: crdt_state.transact does not re-export its `time` import
    monkeypatch.setattr("crdt_state.transact.time.sleep", slept.append)
    state = SharedState(resolvers={"owner": resolvers.retry})
    state.commit({"owner": "x"}, state.token, "init")

    def step(branch: Branch) -> None:
        state.commit({"owner": f"rival{len(slept)}"}, state.token, "rival")
        branch.set("owner", "me")

    policy = Retry(attempts=6, base_delay=0.01, max_delay=0.05, rng=random.Random(3))
    with pytest.raises(RetryExhausted):
        state.transact(step, agent="me", retry=policy)
    assert len(slept) == 5  # no wait after the last attempt
    for attempt, delay in enumerate(slept, start=1):
        assert 0.0 <= delay <= policy.cap(attempt)
