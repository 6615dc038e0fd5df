"""Metrics and inspector feeds of a cluster: merges judged by the owner, seen everywhere.

Two hubs in this process serve the same rooms on a private redis-server and the
module's throwaway PostgreSQL database. Whichever hub owns a room (both cases are run),
each merge is counted exactly once, in the ``/metrics`` of the hub its agent talks to,
and every hub's inspector feed for the room shows every merge result and conflict.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from typing import Any

import pytest
from cluster_servers import RedisServer
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from crdt_state import ConflictError
from sync import Hub, connect
from sync.server.observe.inspector import NO_SUCH_ROOM

pytestmark = pytest.mark.slow


def metric(hub: Hub, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{hub.port}/metrics", timeout=5).read()
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if wanted else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text.decode(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def counts(hub: Hub) -> tuple[float, ...]:
    return await asyncio.to_thread(
        lambda: (
            metric(hub, "crdt_state_merges_total", status="ok"),
            metric(hub, "crdt_state_merges_total", status="conflict"),
            metric(hub, "crdt_state_merges_total", status="error"),
            metric(hub, "crdt_state_merge_errors_total", code="conflict"),
            metric(hub, "crdt_state_conflicts_total", policy="unresolved"),
            metric(hub, "crdt_state_merge_seconds_count"),
            metric(hub, "crdt_state_durable_commit_seconds_count"),
        )
    )


class Feed:
    """An inspector feed of one hub, collecting its ``merge`` events."""

    def __init__(self, hub: Hub, room: str) -> None:
        self.url = f"ws://127.0.0.1:{hub.port}/inspect/{room}/feed"
        self.merges: list[dict[str, Any]] = []
        self.ready = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async with ws_connect(self.url) as ws:
            async for frame in ws:
                event = json.loads(frame)
                if event["type"] == "state":
                    self.ready.set()
                elif event["type"] == "merge":
                    self.merges.append(event)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def until(check: Any, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("first", [0, 1], ids=["a-owns", "b-owns"])
async def test_each_merge_is_counted_once_where_it_was_answered_and_fed_everywhere(
    hubs: tuple[Hub, Hub], private_redis: RedisServer, first: int
) -> None:
    a, b = hubs
    room = f"observe/{first}"
    opener = hubs[first]
    async with connect(opener.url(room), agent="opener") as agent:  # the room's first hub
        await agent.acommit({"opened": True}, agent.token)
    node = opener._cluster
    assert node is not None
    redis = node.redis
    holder = await redis.get(node.key_space.key(room, "owner"))
    assert not isinstance(holder, str)  # bytes or None: a client without decode_responses
    assert holder is not None and holder.decode().startswith(node.hub_id)  # it owns the room
    before_a, before_b = await counts(a), await counts(b)
    async with (
        connect(a.url(room), agent="on-a") as on_a,
        connect(b.url(room), agent="on-b") as on_b,
    ):
        await until(lambda: on_a.get("opened") is True and on_b.get("opened") is True)
        feeds = [Feed(a, room), Feed(b, room)]
        try:
            for feed in feeds:
                await asyncio.wait_for(feed.ready.wait(), 10)
            for i in range(5):  # 5 merges answered by A
                await on_a.acommit({("by_a", f"k{i}"): i}, on_a.token)
            await until(lambda: on_b.get(("by_a", "k4")) == 4)
            base = on_a.token
            await on_b.acommit({"status": "b"}, on_b.token)  # 1 merge answered by B
            await until(lambda: on_a.get("status") == "b")
            with pytest.raises(ConflictError):  # 1 refused conflict answered by A
                await on_a.acommit({"status": "a"}, base)
            await until(lambda: all(len(feed.merges) == 7 for feed in feeds))
        finally:
            for feed in feeds:
                await feed.close()
    after_a, after_b = await counts(a), await counts(b)
    delta_a = tuple(x - y for x, y in zip(after_a, before_a, strict=True))
    delta_b = tuple(x - y for x, y in zip(after_b, before_b, strict=True))
    # ok, conflict (settled), error (refused), of it for a conflict, unresolved conflicts,
    # latencies, durable ones
    assert delta_a == (5, 0, 1, 1, 1, 6, 5)
    assert delta_b == (1, 0, 0, 0, 0, 1, 1)
    for feed in feeds:  # both hubs' feeds, whoever judged and whoever answered
        statuses = [m["status"] for m in feed.merges]
        assert statuses == ["ok"] * 6 + ["error"]
        (conflict,) = feed.merges[-1]["conflicts"]
        assert conflict["path"] == ["status"]
        assert (conflict["current"], conflict["incoming"]) == ("b", "a")
        assert (conflict["current_agent"], conflict["incoming_agent"]) == ("on-b", "on-a")
        assert feed.merges[-1]["agent"] == "on-a"
    assert [m["agent"] for m in feeds[0].merges[:5]] == ["on-a"] * 5  # A's own sessions
    assert feeds[1].merges[5]["agent"] == "on-b"


async def test_a_feed_on_a_hub_that_has_not_loaded_the_room_watches_it(
    hubs: tuple[Hub, Hub],
) -> None:
    """It closed with 4404 "no such room" although the room is stored in PostgreSQL."""
    a, b = hubs
    room = "observe/unloaded-on-b"
    async with connect(a.url(room), agent="writer") as agent:
        await agent.acommit({"x": 1}, agent.token)
    assert room not in b.rooms
    async with ws_connect(f"ws://127.0.0.1:{b.port}/inspect/{room}/feed") as ws:
        async with asyncio.timeout(10):
            while (event := json.loads(await ws.recv()))["type"] != "state":
                pass
    assert event["state"] == {"x": 1}
    with pytest.raises(ConnectionClosed) as closed:  # a room never stored: nothing made
        async with ws_connect(f"ws://127.0.0.1:{b.port}/inspect/observe/never/feed") as ws:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == NO_SUCH_ROOM
    assert "observe/never" not in b.rooms
