"""Generated hostile merge requests at both hubs of a cluster: each gets a final answer.

Requests with deep, huge, oddly typed values, odd paths (empty keys, NUL, long keys, a
path named twice), stale and empty bases go to the owner's hub and to the other one
(forwarded through Redis). Each must be answered ``OK`` or with an error of a stable,
specific code (never ``internal_error``, never the bare ``crdt_state_error``), on an open
connection, and the room must keep judging an agent's merges on both hubs.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from crdt_state import CrdtStateError
from sync import Hub, connect
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange
from sync.wire.errors import ProtocolError

ROOM = "nasty/merges"
REQUESTS = 150
"""Requests per hub."""
KNOWN = {
    "conflict",
    "duplicate_path",
    "invalid_path",
    "merge_too_deep",
    "merge_too_many_items",
    "merge_too_large",
    "path_not_found",
    "schema",
    "stale_base",
    "unknown_base",
    "unsupported_value",
    "wrong_type",
}
"""The codes such requests may get (all stable, documented in docs/protocol.md)."""


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(10)
    if depth > 6 or kind == 0:
        return rng.choice([None, True, 0, -1, 2**53, 2**70, 0.5, float("inf"), float("nan")])
    if kind == 1:
        return rng.choice(["", "\x00", "é" * 50, "x" * rng.randrange(5_000)])
    if kind == 2:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 3:
        keys = ["", "k", "\x00", "0", "é" * 40]
        return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    if kind == 4:  # a chain past the depth limit
        value: Any = 1
        for _ in range(rng.randrange(10, 120)):
            value = [value] if rng.random() < 0.5 else {"d": value}
        return value
    if kind == 5:
        return ["x"] * rng.randrange(30_000)  # past the item limit, often
    return rng.randrange(100)


def _path(rng: random.Random) -> tuple[str, ...]:
    keys = ["a", "b", "", "0", "k" * 300, "é", "\x00", "n"]
    return tuple(rng.choice(keys) for _ in range(rng.randint(1, 5)))


def _changes(rng: random.Random) -> list[WireChange]:
    changes = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(list(ChangeKind))
        try:
            if kind is ChangeKind.DELETE:
                changes.append(WireChange(kind, _path(rng)))
            else:
                changes.append(WireChange(kind, _path(rng), _value(rng)))
        except CrdtStateError:
            pass  # a shape the wire cannot carry: the client library refuses it first
    return changes


async def _answer(ws: ClientConnection, request_id: int) -> p.MergeReply:
    async with asyncio.timeout(10):
        while True:
            message = p.decode_message(await ws.recv(decode=False))
            if isinstance(message, p.MergeReply) and message.request_id == request_id:
                return message


async def _send_all(url: str, rng: random.Random) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    async with ws_connect(url, compression=None, max_size=None) as ws:
        first = p.decode_message(await ws.recv(decode=False))
        assert isinstance(first, p.SyncStep1)
        for request_id in range(1, REQUESTS + 1):
            changes = _changes(rng)
            base = rng.choice([first.state_vector, first.state_vector, b"\x00"])
            try:
                frame = p.encode_merge_request(request_id, "nasty", base, changes)
            except (CrdtStateError, ProtocolError):
                continue  # not encodable (no change left, too large): nothing to send
            await ws.send(frame)
            reply = await _answer(ws, request_id)
            outcomes[reply.error.code if reply.error is not None else "ok"] += 1
    return outcomes


async def test_hostile_merges_at_both_hubs_get_stable_answers(hubs: tuple[Hub, Hub]) -> None:
    a, b = hubs
    async with (
        connect(a.url(ROOM), agent="on-a") as on_a,
        connect(b.url(ROOM), agent="on-b") as on_b,
    ):
        await on_a.acommit({"a": {"b": [1]}, "n": 1}, on_a.token)  # hub a owns the room
        forwarded = await _send_all(b.url(ROOM), random.Random(11))
        local = await _send_all(a.url(ROOM), random.Random(12))
        for outcomes in (forwarded, local):
            assert set(outcomes) - {"ok"} <= KNOWN, outcomes
            assert outcomes["ok"] > 0 and sum(outcomes.values()) > REQUESTS // 2, outcomes
        for remote, key in ((on_a, "after_a"), (on_b, "after_b")):
            result = await remote.acommit({key: True}, remote.token)
            assert result.applied == ((key,),)
