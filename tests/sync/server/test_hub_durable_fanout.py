"""A durable hub sends a change to no one before it is in the room's file.

The disk is held shut (every commit of the state file waits on an event), so
changes sit in the hub's memory, not yet durable: the merge's update, its
answer, a relayed Yjs update and a sync answer to a new peer must all wait.
Otherwise a client could hold a change that a hub killed at that moment no
longer has after its restart (see ``test_hub_crash.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest
from hubs import eventually
from pycrdt import Doc, Map
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from crdt_state import storage
from sync.server.hub import Hub
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange


class Peer:
    """A raw y-websocket peer that records every message the hub sends it."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.messages: list[p.Message] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in self.ws:
                assert isinstance(data, bytes)
                self.messages.append(p.decode_message(data))

    def of(self, kind: type[Any] | tuple[type[Any], ...]) -> list[Any]:
        return [m for m in self.messages if isinstance(m, kind)]

    def content(self) -> dict[str, Any]:
        """The room as the updates received so far (sync step 2 and updates) make it."""
        doc: Doc[Any] = Doc()
        for message in self.of((p.SyncStep2, p.SyncUpdate)):
            doc.apply_update(message.update)
        state: dict[str, Any] = doc.get("state", type=Map).to_py() or {}
        return state

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


async def join(url: str, *, sync: bool = True) -> Peer:
    peer = Peer(await ws_connect(url, compression=None))
    if sync:
        await peer.ws.send(p.encode_sync_step1(b"\x00"))
    return peer


def merge_request(request_id: int, path: str, value: int) -> bytes:
    return p.encode_merge_request(
        request_id, "w", b"\x00", [WireChange(ChangeKind.SET, (path,), value)], writer="w"
    )


def yjs_update(key: str, value: int) -> bytes:
    """A stock Yjs client's update that sets ``state[key]``."""
    doc: Doc[Any] = Doc()
    updates: list[bytes] = []
    doc.observe(lambda event: updates.append(event.update))
    doc.get("state", type=Map)[key] = value
    return updates[-1]


async def test_changes_leave_the_hub_only_once_durable(
    tmp_path: Path, disk: threading.Event
) -> None:
    async with Hub(port=0, db=tmp_path / "hub") as hub:
        url = hub.url("gate")
        observer = await join(url)
        writer = await join(url)
        yjs = await join(url)
        await eventually(lambda: all(x.of(p.SyncStep2) for x in (observer, writer, yjs)))
        state = hub.rooms["gate"].state
        disk.clear()
        await writer.ws.send(merge_request(7, "x", 1))
        await yjs.ws.send(p.encode_update(yjs_update("y", 2)))
        await eventually(lambda: state.get("x") == 1 and state.get("y") == 2)  # in memory
        late = await join(url)  # asks for the room while nothing of it is durable
        await asyncio.sleep(0.3)
        for peer in (observer, writer, yjs):
            assert not peer.of(p.SyncUpdate), "an update left the hub before it was durable"
        assert not writer.of(p.MergeReply)
        assert not late.of(p.SyncStep2), "a sync answer held changes that were not durable"
        disk.set()
        for peer in (observer, writer, yjs, late):
            await eventually(lambda peer=peer: peer.content() == {"x": 1, "y": 2})  # type: ignore[misc]
        await eventually(lambda: bool(writer.of(p.MergeReply)))
        result = writer.of(p.MergeReply)[0]
        assert result.status is p.MergeStatus.OK
        first_update = next(i for i, m in enumerate(writer.messages) if isinstance(m, p.SyncUpdate))
        assert first_update < writer.messages.index(result), "the update comes before the answer"
        for peer in (observer, writer, yjs, late):
            await peer.close()


async def test_changes_that_cannot_be_stored_are_sent_to_no_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Hub(port=0, db=tmp_path / "hub") as hub:
        url = hub.url("broken")
        observer = await join(url)
        writer = await join(url)
        await eventually(lambda: bool(observer.of(p.SyncStep2) and writer.of(p.SyncStep2)))

        def broken(self: storage.Store, batch: Any) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(storage.Store, "_commit", broken)
        await writer.ws.send(merge_request(8, "x", 1))
        await eventually(lambda: bool(writer.of(p.MergeReply)))
        result = writer.of(p.MergeReply)[0]
        assert result.status is p.MergeStatus.ERROR
        assert result.error is not None and result.error.code == "storage"
        await asyncio.sleep(0.2)
        assert observer.content() == {} and writer.content() == {}
        assert not observer.of(p.SyncUpdate) and not writer.of(p.SyncUpdate)
        for peer in (observer, writer):
            await peer.close()


async def test_a_connection_has_one_merge_waiting_for_the_disk_at_a_time(
    tmp_path: Path, disk: threading.Event
) -> None:
    """The next merge of a connection is judged once the previous one is durable."""
    async with Hub(port=0, db=tmp_path / "hub") as hub:
        url = hub.url("one-at-a-time")
        writer = await join(url)
        await eventually(lambda: bool(writer.of(p.SyncStep2)))
        state = hub.rooms["one-at-a-time"].state
        disk.clear()
        await writer.ws.send(merge_request(1, "x", 1))
        await writer.ws.send(merge_request(2, "y", 2))
        await eventually(lambda: state.get("x") == 1)
        await asyncio.sleep(0.3)
        assert state.get("y") is None, "the second merge was judged before the first was stored"
        assert not writer.of(p.MergeReply)
        disk.set()
        await eventually(lambda: len(writer.of(p.MergeReply)) == 2)
        replies = writer.of(p.MergeReply)
        assert [r.request_id for r in replies] == [1, 2]
        assert all(r.status is p.MergeStatus.OK for r in replies)
        assert state.get("y") == 2
        await writer.close()


async def test_a_merge_that_writes_nothing_is_answered_once_remembered_on_disk(
    tmp_path: Path, disk: threading.Event
) -> None:
    """A merge with no change to store is answered once its request id is stored."""
    async with Hub(port=0, db=tmp_path / "hub") as hub:
        url = hub.url("nothing")
        writer = await join(url)
        await eventually(lambda: bool(writer.of(p.SyncStep2)))
        disk.clear()
        request = p.encode_merge_request(
            3, "w", b"\x00", [WireChange(ChangeKind.DELETE, ("absent",))], writer="w"
        )
        await writer.ws.send(request)
        await asyncio.sleep(0.3)
        assert not writer.of(p.MergeReply), "answered before its request id was stored"
        disk.set()
        await eventually(lambda: bool(writer.of(p.MergeReply)))
        reply = writer.of(p.MergeReply)[0]
        assert reply.status is p.MergeStatus.OK and reply.applied == ()
        await writer.close()
