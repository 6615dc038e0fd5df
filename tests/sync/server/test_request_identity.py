"""Request ids are deduplicated per writer, never across a whole room (real hub, loopback)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from crdt_state import Retry
from sync.client.remote import RemoteState, connect
from sync.server.hub import Hub
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange


async def merge_over(ws: ClientConnection, frame: bytes) -> p.MergeReply:
    await ws.send(frame)
    async with asyncio.timeout(5):
        while True:
            message = p.decode_message(await ws.recv())  # type: ignore[arg-type]
            if isinstance(message, p.MergeReply):
                return message


def set_frame(request_id: int, key: str, value: int, writer: str = "") -> bytes:
    change = WireChange(ChangeKind.SET, (key,), value)
    return p.encode_merge_request(request_id, key, b"\x00", [change], writer=writer)


async def test_same_id_on_two_connections_without_writer_is_two_merges() -> None:
    """The reported bug: B got A's answer and ``bob`` was never written."""
    async with Hub(port=0) as hub:
        url = hub.url("ids/third-party")
        async with ws_connect(url, compression=None) as a, ws_connect(url, compression=None) as b:
            first = await merge_over(a, set_frame(1, "alice", 1))
            second = await merge_over(b, set_frame(1, "bob", 2))
            assert first.applied == (("alice",),) and second.applied == (("bob",),)
            assert second.token != first.token
            # within one connection the id still deduplicates
            again = await merge_over(b, set_frame(1, "bob", 3))
            assert again.token == second.token
        assert hub.rooms["ids/third-party"].state.snapshot() == {"alice": 1, "bob": 2}


async def test_same_id_of_two_writers_is_two_merges_and_a_writer_is_known_anywhere(
    tmp_path: Path,
) -> None:
    async with Hub(port=0, db=tmp_path / "hub.db") as hub:
        url = hub.url("ids/writers")
        async with ws_connect(url, compression=None) as a, ws_connect(url, compression=None) as b:
            await merge_over(a, set_frame(7, "alice", 1, writer="writer-a"))
            second = await merge_over(b, set_frame(7, "bob", 2, writer="writer-b"))
            assert second.applied == (("bob",),)
        # the same writer on a new connection: a re-sent request, applied once
        async with ws_connect(url, compression=None) as c:
            repeat = await merge_over(c, set_frame(7, "bob", 99, writer="writer-b"))
            assert repeat.token == second.token
        assert hub.rooms["ids/writers"].state.snapshot() == {"alice": 1, "bob": 2}


async def test_two_remote_agents_that_draw_the_same_request_id_are_both_applied() -> None:
    async with (
        Hub(port=0) as hub,
        connect(hub.url("ids/agents"), agent="a") as a,
        connect(hub.url("ids/agents"), agent="b") as b,
    ):
        assert a.writer != b.writer and len(a.writer) == 32
        a._outbox.new_id = b._outbox.new_id = lambda: 1  # both draw request id 1
        one = await a.acommit({"alice": 1}, a.token)
        two = await b.acommit({"bob": 2}, b.token)
        assert one.applied == (("alice",),) and two.applied == (("bob",),)
        assert hub.rooms["ids/agents"].state.snapshot() == {"alice": 1, "bob": 2}


async def test_the_writer_id_is_kept_in_the_local_file(tmp_path: Path) -> None:
    local = tmp_path / "agent.sqlite"
    fast = Retry(attempts=1, base_delay=0.02, max_delay=0.1)
    async with Hub(port=0) as hub:
        async with connect(hub.url("ids/file"), agent="a", local=local, reconnect=fast) as one:
            first = one.writer
        async with connect(hub.url("ids/file"), agent="a", local=local, reconnect=fast) as two:
            assert two.writer == first
        other = RemoteState(hub.url("ids/file"), agent="a")
        assert other.writer != first  # no local file: a new writer per process


async def test_request_ids_are_never_reused_by_a_restarted_client(tmp_path: Path) -> None:
    """Ids count up per writer; the local file keeps the next one across restarts."""
    local = tmp_path / "agent.sqlite"
    fast = Retry(attempts=1, base_delay=0.02, max_delay=0.1)
    async with Hub(port=0) as hub:
        url = hub.url("ids/restart")
        async with connect(url, agent="a", local=local, reconnect=fast) as one:
            await one.acommit({"first": 1}, one.token)  # request 1, answered: nothing queued
            writer = one.writer
        async with connect(url, agent="a", local=local, reconnect=fast) as two:
            result = await two.acommit({"second": 2}, two.token)  # must not reuse id 1
            assert result.applied == (("second",),)
        state = hub.rooms["ids/restart"].state
        assert state.snapshot() == {"first": 1, "second": 2}
        assert (f"w:{writer}", 1) in state._requests and (f"w:{writer}", 2) in state._requests
