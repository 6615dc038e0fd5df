"""Mutated protocol frames for fuzzing hubs (shared by the single-hub and cluster tests).

:func:`seed_frames` gives a valid frame of every kind a client may send; :func:`mutate`
flips, inserts, deletes or truncates a few bytes of one (or, now and then, returns random
bytes), reproducibly from the caller's ``random.Random``.
"""

from __future__ import annotations

import random

from crdt_state import SharedState
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange

__all__ = ["mutate", "seed_frames"]


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
