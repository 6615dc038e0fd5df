"""Remote agents publish presence through standard awareness, seen by any peer."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from hubs import eventually
from websockets.asyncio.client import connect as ws_connect

from crdt_state import SharedState
from sync import connect_blocking
from sync.client import _presence
from sync.client._presence import Peers, Presence
from sync.client.remote import connect
from sync.server.hub import Hub
from sync.server.observe.events import awareness_states
from sync.wire import protocol as p
from sync.wire.awareness import Entry, decode_entries, encode_entries


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


def agent_names(peers: dict[int, Any]) -> set[str]:
    return {s["agent"] for s in peers.values() if isinstance(s, dict) and "agent" in s}


async def test_agents_see_each_other_and_one_that_reconnects_again(hub: Hub) -> None:
    url = hub.url("peers")
    async with (
        connect(url, agent="alice") as alice,
        connect(url, agent="bob") as bob,
        ws_connect(url) as watcher,
    ):
        await eventually(lambda: agent_names(alice.peers) == {"bob"})
        await eventually(lambda: agent_names(bob.peers) == {"alice"})
        assert alice.presence.client not in alice.peers  # its own is left out
        assert alice.peers[bob.presence.client] == bob.presence.state
        # the hub drops bob's connection: its presence is removed, then bob reconnects
        # and announces itself again (its next clock), which every peer takes
        room = hub.rooms["peers"]
        owner = room.awareness.owner(bob.presence.client)
        assert owner is not None
        session = room.sessions[owner]
        assert session.connection is not None
        await session.connection.close(1012, "service restart")
        seen: list[tuple[int, str]] = []  # bob's entries the watcher got: greeting first
        async with asyncio.timeout(5):
            while "null" not in {kind for _, kind in seen} or seen[-1][1] == "null":
                message = p.decode_message(await watcher.recv())  # type: ignore[arg-type]
                if isinstance(message, p.Awareness):
                    seen += [
                        (e.clock, "null" if e.removed else "state")
                        for e in decode_entries(message.payload)
                        if e.client == bob.presence.client
                    ]
        (clock, _), *_ = seen
        assert seen == [(clock, "state"), (clock, "null"), (clock + 1, "state")]
        await eventually(lambda: agent_names(alice.peers) == {"bob"})
        await eventually(lambda: agent_names(bob.peers) == {"alice"})  # the hub's greeting
    async with connect(url, agent="carol") as carol:
        await asyncio.sleep(0.2)
        assert carol.peers == {}  # alice and bob left: removed


def test_a_blocking_client_sees_its_peers(hub_url: str) -> None:
    url = f"{hub_url}/peers-blocking"
    with connect_blocking(url, agent="one") as one, connect_blocking(url, agent="two") as two:
        deadline = time.monotonic() + 5
        while agent_names(one.peers) != {"two"} or agent_names(two.peers) != {"one"}:
            assert time.monotonic() < deadline, (one.peers, two.peers)
            time.sleep(0.02)
        assert one.peers[two.remote.presence.client]["status"] == "idle"


def test_peers_follow_the_clock_rules_and_leave_out_the_agents_own_client() -> None:
    peers = Peers(own=7)

    def update(*entries: tuple[int, int, str]) -> bytes:
        return encode_entries(Entry(*e) for e in entries)

    assert peers.receive(update((7, 1, '{"me":1}'), (8, 2, '{"agent":"b"}'), (9, 1, "not json")))
    view = peers.view
    assert dict(view) == {8: {"agent": "b"}, 9: "not json"}
    assert not peers.receive(update((8, 1, '{"agent":"old"}'), (8, 2, '{"agent":"echo"}')))
    assert peers.receive(update((8, 2, "null")))
    assert dict(peers.view) == {9: "not json"} and 8 in view  # a new view; the old one kept
    assert not peers.receive(b"\x05")  # malformed: ignored
    peers.clear()
    assert dict(peers.view) == {}
    assert peers.receive(update((8, 2, '{"agent":"b"}')))  # after a reconnect: the greeting


async def test_an_unchanged_presence_is_renewed(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stock peers drop a state they have not heard of for 30 s: the agent renews it."""
    monkeypatch.setattr(_presence, "RENEW", 0.3)
    url = hub.url("renew")
    async with ws_connect(url) as watcher, connect(url, agent="idle") as idle:
        clocks: list[int] = []
        async with asyncio.timeout(5):
            while len(clocks) < 3:
                message = p.decode_message(await watcher.recv())  # type: ignore[arg-type]
                if isinstance(message, p.Awareness):
                    clocks += [
                        e.clock
                        for e in decode_entries(message.payload)
                        if e.client == idle.presence.client
                    ]
        assert clocks == sorted(set(clocks))  # each renewal with the next clock
        assert idle.presence.state["status"] == "idle"
