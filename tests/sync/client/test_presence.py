"""Remote agents publish presence through standard awareness, seen by any peer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import connect as ws_connect

from crdt_state import SharedState
from sync.client._presence import Presence
from sync.client.remote import connect
from sync.server.hub import Hub
from sync.server.observe.events import awareness_states
from sync.wire import protocol as p


def test_the_state_goes_out_as_a_standard_awareness_update() -> None:
    presence = Presence(77, "planner")
    first = p.decode_message(presence.frame())
    assert isinstance(first, p.Awareness)
    assert awareness_states(first.payload) == {
        77: {"agent": "planner", "status": "idle", "base": None, "paths": [],
             "last_merge": None, "queued": 0}
    }  # fmt: skip
    presence.forked(SharedState().token)
    presence.merging([("a", "b"), ("c",)], online=False, queued=1)
    state = awareness_states(p.decode_message(presence.frame()).payload)[77]  # type: ignore[union-attr]
    assert state["status"] == "offline-queued" and state["paths"] == [["a", "b"], ["c"]]
    assert state["queued"] == 1 and presence.clock == 2
    presence.merging([("c",)], online=True, queued=0)
    presence.merged("ok", queued=0)
    assert presence.state["paths"] == [["a", "b"], ["c"]]  # no duplicates, newest last
    assert (presence.state["status"], presence.state["last_merge"]) == ("idle", "ok")


async def agents(feed: Any, want: Any) -> list[dict[str, Any]]:
    """Read feed events until an ``agents`` event satisfies ``want``."""
    async with asyncio.timeout(5):
        while True:
            event = json.loads(await feed.recv())
            if event["type"] == "agents" and want(event["agents"]):
                return list(event["agents"])


async def test_the_room_sees_each_agent_and_what_it_does() -> None:
    async with Hub(port=0) as hub:
        feed_url = f"ws://127.0.0.1:{hub.port}/inspect/team/feed"
        async with connect(hub.url("team"), agent="alice") as alice, ws_connect(feed_url) as feed:
            (seen,) = await agents(feed, lambda a: len(a) == 1)
            assert seen["state"]["agent"] == "alice" and seen["state"]["status"] == "idle"
            branch = alice.fork()
            await agents(feed, lambda a: a and a[0]["state"]["status"] == "editing")
            branch.set("plan.owner", "alice")
            await branch.amerge()
            (done,) = await agents(feed, lambda a: a and a[0]["state"]["last_merge"] == "ok")
            assert done["state"]["status"] == "idle"
            assert done["state"]["paths"] == [["plan", "owner"]]
            assert done["state"]["base"]
            async with ws_connect(hub.url("team")) as stock:  # a plain Yjs peer sees it too
                async with asyncio.timeout(5):
                    while True:
                        message = p.decode_message(await stock.recv())  # type: ignore[arg-type]
                        if isinstance(message, p.Awareness):
                            states = awareness_states(message.payload)
                            if any(s and s.get("agent") == "alice" for s in states.values()):
                                break
        async with ws_connect(feed_url) as feed:
            assert await agents(feed, lambda a: a == []) == []  # retired when alice left
