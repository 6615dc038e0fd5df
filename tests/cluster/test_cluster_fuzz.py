"""Mutated frames at both hubs of a cluster: the room keeps serving, nothing poisons it.

A frame a follower hub accepts goes into the room's Redis ``in`` stream, and the owner
judges it later: an entry the owner could not get past would stop the room for every
hub, and the next owner would meet it again. So fuzzed frames go to the owner's hub (its
local path) and to the other one (the forwarded path), while agents on both keep merging;
every agent merge must be acknowledged and applied on both hubs, both replicas must end
equal, and no hub may log an internal error.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter

import pytest
from fuzz_frames import seed_frames, send_mutated

from sync import Hub, connect

ROOM = "fuzz/cluster"
FRAMES = 600
"""Mutated frames per hub."""


async def _fuzz(url: str, seed: int) -> tuple[int, Counter[str]]:
    """``FRAMES`` mutated frames: the frames processed, the reasons of the hub's closes."""
    run = await send_mutated(url, random.Random(seed), seed_frames(), FRAMES)
    return run.processed, Counter(reason or "(none)" for _, reason in run.closes)


async def test_fuzzed_frames_at_both_hubs_never_stop_the_room(
    hubs: tuple[Hub, Hub], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = hubs
    caplog.set_level(logging.WARNING)
    async with (
        connect(a.url(ROOM), agent="on-a") as on_a,
        connect(b.url(ROOM), agent="on-b") as on_b,
    ):
        await on_a.acommit({"start": True}, on_a.token)  # hub a opens the room first: owner
        merged = 0

        async def agents() -> None:
            nonlocal merged
            for n in range(40):
                for remote, tag in ((on_a, "a"), (on_b, "b")):
                    result = await remote.acommit({f"{tag}{n}": n}, remote.token)
                    assert result.applied == ((f"{tag}{n}",),), result
                    merged += 1
                await asyncio.sleep(0.02)

        results = await asyncio.gather(_fuzz(a.url(ROOM), 1), _fuzz(b.url(ROOM), 2), agents())
        for processed, closes in results[:2]:
            assert processed == FRAMES
            assert closes.total() > FRAMES // 20  # most are refused, closing only their own
            # garbage updates the hubs decoded went to the owner's judge (from hub b through
            # the room's stream), which refused them: that session alone was closed
            refused = sum(n for why, n in closes.items() if why.startswith("update refused"))
            assert refused > 0, closes
        assert merged == 80
        await on_a.acommit({"after": "a"}, on_a.token)
        await on_b.acommit({"after_b": "b"}, on_b.token)
        for remote in (on_a, on_b):
            async with asyncio.timeout(10):
                while remote.get("after_b") != "b" or remote.get("after") != "a":
                    await asyncio.sleep(0.02)
            assert all(remote.get(f"a{n}") == n and remote.get(f"b{n}") == n for n in range(40))
    replicas = [hub.rooms[ROOM].state for hub in hubs]
    async with asyncio.timeout(10):
        while replicas[0].snapshot() != replicas[1].snapshot():
            await asyncio.sleep(0.02)
    stepped = [r for r in caplog.records if "stepping down" in r.getMessage()]
    assert not stepped, [r.getMessage() for r in stepped]  # no frame made the owner quit
    internal = [r for r in caplog.records if "internal" in r.getMessage().lower()]
    assert not internal, [r.getMessage() for r in internal]
    crashed = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert not crashed, [r.getMessage() for r in crashed]
