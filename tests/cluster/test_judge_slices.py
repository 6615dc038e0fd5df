"""An owner's batch hands the event loop back while it judges (``judging.SLICE``).

A batch of writes that are each slow to judge (an offline agent's queued merges, each
building on every one before it) must not hold the hub's event loop for seconds: the
lease renewals and the other rooms run in between. A real judge state and real merge
requests; the slice is made short so that a small batch crosses it.
"""

from __future__ import annotations

import asyncio

import pytest

from crdt_state import SharedState
from sync.server.cluster import judging
from sync.server.cluster.judging import BatchJudge
from sync.server.cluster.streams import MERGE, AnswerKind, Fields, InEntry, encode_in
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange

MERGES = 40


def _judged(judge: SharedState) -> int:
    """The newest merge the judge has taken (each sets ``n`` to its number)."""
    value = judge.read()[0].get("n", 0)
    assert isinstance(value, int)
    return value


def _queued_merges(base: bytes) -> list[tuple[str, Fields]]:
    """``in`` entries of one agent's queued merges: merge n sets ``n`` on ``base``,
    building on merges 1..n-1 (as an agent that merged offline sends them)."""
    entries: list[tuple[str, Fields]] = []
    for n in range(1, MERGES + 1):
        change = WireChange(ChangeKind.SET, ("n",), n)
        request = p.MergeRequest(
            request_id=n, agent="w", base=base, changes=(change,), chain=tuple(range(1, n))
        )
        entry = InEntry(MERGE, p.encode_message(request), "hub-a", 1, "w", "w")
        entries.append((f"1-{n}", encode_in(entry)))
    return entries


async def test_a_slow_batch_lets_the_loop_run_and_judges_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(judging, "SLICE", 0.0)  # hand back after every write
    judge = SharedState()
    batch = BatchJudge(judge, "room", max_document=1 << 24)
    unsubscribe = batch.subscribe()
    ticks = 0
    judged_at_ticks: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            judged_at_ticks.append(_judged(judge))
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        out = await batch.batch(_queued_merges(judge.token.to_state()), (), "0-0", 1)
    finally:
        task.cancel()
        unsubscribe()
    assert ticks >= MERGES // 2  # the loop ran between the writes, not only at the end
    assert len(set(judged_at_ticks)) > MERGES // 2  # ...while the batch was being judged
    assert judge.read()[0] == {"n": MERGES}
    assert sorted(judged_at_ticks) == judged_at_ticks  # in order, one by one
    replies = [p.decode_message(a.payload) for a in out.answers]
    assert all(a.kind is AnswerKind.REPLY for a in out.answers)
    assert [r.request_id for r in replies if isinstance(r, p.MergeReply)] == list(
        range(1, MERGES + 1)
    )
    assert all(isinstance(r, p.MergeReply) and r.status is p.MergeStatus.OK for r in replies)


async def test_a_fast_batch_is_judged_without_handing_back() -> None:
    judge = SharedState()
    batch = BatchJudge(judge, "room", max_document=1 << 24)
    unsubscribe = batch.subscribe()
    seen: list[int] = []

    async def watcher() -> None:
        while True:
            seen.append(_judged(judge))
            await asyncio.sleep(0)

    task = asyncio.create_task(watcher())
    await asyncio.sleep(0)
    try:
        await batch.batch(_queued_merges(judge.token.to_state())[:5], (), "0-0", 1)
    finally:
        task.cancel()
        unsubscribe()
    assert _judged(judge) == 5 and all(n in (0, 5) for n in seen)
