"""A hub client's replica refuses values too deep to read, whatever its hub sends.

The replica is a follower (it takes the hub's content as it is), but a value thousands
of levels deep would fail halfway through being read (Python's recursion limit) and
leave the replica's document and its plain mirror apart. A small websocket server here
plays a faulty hub that sends one: the client refuses the update before applying
anything, drops the connection as for any bad frame, and its replica stays readable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hubs import FAST, eventually
from pycrdt import Doc, Map
from websockets.asyncio.server import ServerConnection, serve

import sync
from crdt_state import SharedState, UnsupportedValue
from crdt_state.values import MAX_DEPTH
from sync.wire import protocol as p


def nested(depth: int, key: str = "deep") -> bytes:
    """A Yjs update writing a map ``depth`` levels deep at ``key`` of the state's root."""
    doc: Doc[Map[object]] = Doc()
    node = doc.get("state", type=Map)
    child: Map[object] = Map()
    node[key] = child
    for _ in range(depth - 1):
        inner: Map[object] = Map()
        child["k"] = inner
        child = inner
    child["leaf"] = 1
    return doc.get_update()


def plain(key: str, value: int) -> bytes:
    doc: Doc[Map[object]] = Doc()
    doc.get("state", type=Map)[key] = value
    return doc.get_update()


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 3_000])
def test_a_checking_follower_refuses_before_applying(depth: int) -> None:
    replica = SharedState(follower=True, check_depth=True)
    replica.apply_update(plain("ok", 1))
    token = replica.token
    with pytest.raises(UnsupportedValue) as caught:
        replica.apply_update(nested(depth))
    assert caught.value.details["limit"] == MAX_DEPTH and caught.value.details["depth"] > MAX_DEPTH
    assert replica.snapshot() == {"ok": 1} and replica.token == token  # nothing applied
    replica.apply_update(nested(MAX_DEPTH - 1, "fits"))  # as deep as allowed: taken
    assert "fits" in replica.snapshot()


def test_followers_skip_the_check_unless_asked_and_authorities_always_check() -> None:
    deep = nested(MAX_DEPTH + 10)
    follower = SharedState(follower=True)  # a hub's own replica: its owner validated
    follower.apply_update(deep)
    assert "deep" in follower.snapshot()
    with pytest.raises(UnsupportedValue):
        SharedState().apply_update(deep)


class _FaultyHub:
    """Syncs a small state, then sends a value 3,000 levels deep on every connection."""

    def __init__(self) -> None:
        self.connections = 0

    async def handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        await ws.send(p.encode_sync_step1(b"\x00"))
        async for data in ws:
            assert isinstance(data, bytes)
            if isinstance(p.decode_message(data), p.SyncStep1):
                await ws.send(p.encode_sync_step2(plain("ok", 1)))
                await ws.send(p.encode_update(nested(3_000)))


@asynccontextmanager
async def _faulty() -> AsyncIterator[tuple[_FaultyHub, str]]:
    fake = _FaultyHub()
    async with serve(fake.handle, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield fake, f"ws://127.0.0.1:{port}/room"


async def test_the_client_refuses_a_faulty_hubs_deep_value_and_stays_readable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _faulty() as (fake, url), sync.connect(url, agent="a", reconnect=FAST) as remote:
        await eventually(lambda: fake.connections >= 3)  # each time: refused, dropped
        assert remote.snapshot() == {"ok": 1}
        assert remote.get("deep") is None
    lost = [r for r in caplog.records if r.name == "crdt_state.client" and "lost" in r.message]
    assert lost and all(r.levelname == "WARNING" for r in lost)
    assert "UnsupportedValue" in lost[0].message and "3001 levels deep" in lost[0].message
