"""Mutated plain Yjs updates at one hub: each is applied or refused, never an internal error.

Garbage the hub's state applies can leave structs pending; a later update pycrdt cannot
merge with them used to escape as a raw ``ValueError``: the hub closed that session with
1011 and logged an internal error. Every refusal is now the session's own close (1003,
"update refused: ..."; 1008 for content outside the JSON model; 1002/1007 for frames
that do not decode), and the room keeps taking merges.
"""

from __future__ import annotations

import logging
import random

import pytest
from fuzz_frames import seed_frames, send_mutated

from sync.client.remote import connect
from sync.server.hub import Hub

INTERNAL_ERROR = 1011


async def test_garbage_updates_close_only_their_session_with_a_reason(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    url = hub.url("garbage")
    updates = seed_frames()[1:3]  # sync step 2 and update frames
    async with connect(url, agent="good") as good:
        await good.acommit({"a": {"b": [1, "x"]}, "n": 3}, good.token)

        async def merge_now_and_then(n: int) -> None:
            if n % 250 == 0:
                result = await good.acommit({f"k{n}": n}, good.token)
                assert result.applied == ((f"k{n}",),)

        run = await send_mutated(url, random.Random(0), updates, 1_500, between=merge_now_and_then)
        codes = [code for code, _ in run.closes]
        assert codes and INTERNAL_ERROR not in codes, sorted(set(codes))
        result = await good.acommit({"after": True}, good.token)
        assert result.applied == (("after",),)
    internal = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not internal, internal
