"""Mutated protocol frames for fuzzing hubs (shared by the single-hub and cluster tests).

:func:`seed_frames` gives a valid frame of every kind a client may send; :func:`mutate`
flips, inserts, deletes or truncates a few bytes of one (or, now and then, returns random
bytes), reproducibly from the caller's ``random.Random``; :func:`send_mutated` sends such
frames to a hub, one connection at a time, and counts how each ended.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from crdt_state import SharedState
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange

__all__ = ["FuzzRun", "mutate", "seed_frames", "send_mutated"]


def seed_frames() -> list[bytes]:
    """Valid frames of every kind, to be mutated."""
    source = SharedState(client_id=424242)  # fixed: the same bytes, so the same mutations
    source.commit({"a": {"b": [1, "x"]}, "n": 3}, source.token, "seed")
    return [
        p.encode_sync_step1(source.token.to_state()),
        p.encode_sync_step2(source.get_update()),
        p.encode_update(source.get_update()),
        p.encode_awareness(b"\x01\x9a\x05\x01\x02{}"),
        p.encode_query_awareness(),
        p.encode_merge_request(
            7,
            "fuzzer",
            source.token.to_state(),
            [
                WireChange(ChangeKind.SET, ("a", "c"), {"deep": [1, 2]}),
                WireChange(ChangeKind.APPEND, ("a", "b"), [3]),
                WireChange(ChangeKind.DELETE, ("n",)),
            ],
        ),
    ]


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """``frame`` with 1-4 random byte edits (15 %: random bytes instead)."""
    data = bytearray(frame)
    if rng.random() < 0.15:
        return rng.randbytes(rng.randint(0, 64))
    for _ in range(rng.randint(1, 4)):
        op = rng.randint(0, 3)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        elif op == 2 and data:
            del data[rng.randrange(len(data))]
        elif data:
            del data[rng.randrange(len(data)) :]  # truncate
    return bytes(data)


@dataclass
class FuzzRun:
    """What :func:`send_mutated` saw."""

    processed: int = 0
    """Frames sent and dealt with (answered, or their connection closed by the hub)."""
    closes: list[tuple[int, str]] = field(default_factory=list)
    """``(close code, reason)`` of each connection the hub closed (``(0, "")``: no frame)."""


async def send_mutated(
    url: str,
    rng: random.Random,
    seeds: Sequence[bytes],
    count: int,
    *,
    timeout: float = 10.0,
    between: Callable[[int], Awaitable[None]] | None = None,
) -> FuzzRun:
    """Send ``count`` mutations of ``seeds`` to the hub at ``url``, each with a probe.

    After each frame a sync step 1 probe is sent and its answer awaited (at most
    ``timeout`` seconds): the hub dealt with the frame. A connection the hub closes is
    counted and replaced. ``between(n)`` runs after the ``n``-th frame (from 0).
    """
    run = FuzzRun()
    probe = p.encode_sync_step1(b"\x00")
    ws: ClientConnection = await ws_connect(url, compression=None)
    try:
        for n in range(count):
            try:
                await ws.send(mutate(rng, rng.choice(seeds)))
                await ws.send(probe)
                async with asyncio.timeout(timeout):
                    while not isinstance(
                        p.decode_message(await ws.recv(decode=False)), p.SyncStep2
                    ):
                        pass
            except ConnectionClosed as exc:
                frame = exc.rcvd
                run.closes.append((frame.code, frame.reason) if frame is not None else (0, ""))
                ws = await ws_connect(url, compression=None)
            run.processed += 1
            if between is not None:
                await between(n)
    finally:
        await ws.close()
    return run
