"""Durable merges taken from the read callback are answered only once they are in the file.

The hub takes a durable room's merge in ``websockets``' read callback as it takes a
memory room's (``Hub._take_now``), but its answer must still wait until the room's
SQLite file holds it. Here the room's writer is held back (every commit waits on an
event), and each client checks, the moment an answer arrives, with its own SQLite
connection to the room's file, that the merge's request id is stored there. A failing
store must still give the client the typed ``storage`` error, and each connection's
answers must keep their order.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, Self

import pytest
from hubs import eventually
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from crdt_state import storage
from sync.server._store import room_file
from sync.server.hub import Hub
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange


class _CountingHub(Hub):
    """The hub as shipped, counting the messages it takes from the read callback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.taken = 0

    async def __aenter__(self) -> Self:  # Hub.__aenter__ is typed to return a Hub
        await super().__aenter__()
        return self

    def _take_now(self, *args: Any) -> bool:
        took = super()._take_now(*args)
        self.taken += took
        return took


def _stored(file: Path, writer: str, request_id: int) -> bool:
    """True when the room's file (read by a connection of its own) holds the request id.

    The hub keeps a named writer's request ids as ``w:<writer>`` (``_merge.writer_of``).
    """
    with contextlib.closing(sqlite3.connect(file)) as db:
        query = "SELECT 1 FROM writer_requests WHERE writer = ? AND id = ?"
        return db.execute(query, (f"w:{writer}", request_id)).fetchone() is not None


class _Client:
    """A raw client of one writer that checks the file as each answer arrives."""

    def __init__(self, ws: ClientConnection, writer: str, file: Path) -> None:
        self.ws = ws
        self.writer = writer
        self.answers: list[tuple[int, p.MergeStatus, str | None, bool]] = []
        """Request id, status, error code, and whether the file held it when answered."""
        self.synced = False
        self.file = file
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in self.ws:
                assert isinstance(data, bytes)
                message = p.decode_message(data)
                if isinstance(message, p.SyncStep2):
                    self.synced = True
                elif isinstance(message, p.MergeReply):
                    stored = _stored(self.file, self.writer, message.request_id)
                    code = message.error.code if message.error is not None else None
                    self.answers.append((message.request_id, message.status, code, stored))

    async def send_merge(self, request_id: int, path: str, value: int) -> None:
        change = WireChange(ChangeKind.SET, (path,), value)
        request = p.encode_merge_request(
            request_id, self.writer, b"\x00", [change], writer=self.writer
        )
        await self.ws.send(request)

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


async def _join(hub: Hub, room: str, writer: str) -> _Client:
    file = room_file(hub.db, room) if hub.db is not None else Path()
    client = _Client(await ws_connect(hub.url(room), compression=None), writer, file)
    await client.ws.send(p.encode_sync_step1(b"\x00"))
    await eventually(lambda: client.synced)
    return client


async def test_a_taken_durable_merge_is_answered_only_once_the_file_holds_it(
    tmp_path: Path, disk: threading.Event
) -> None:
    async with _CountingHub(port=0, db=tmp_path / "hub") as hub:
        client = await _join(hub, "held", "w")
        state = hub.rooms["held"].state
        for request_id in range(1, 6):
            disk.clear()
            taken = hub.taken
            await client.send_merge(request_id, f"k{request_id}", request_id)
            await eventually(lambda r=request_id: state.get(f"k{r}") == r)  # type: ignore[misc]
            assert hub.taken == taken + 1, "the merge did not take the short cut"
            await asyncio.sleep(0.2)
            assert len(client.answers) == request_id - 1, "answered while the writer was held"
            assert not _stored(client.file, "w", request_id)
            disk.set()
            await eventually(lambda r=request_id: len(client.answers) == r)  # type: ignore[misc]
        assert client.answers == [(r, p.MergeStatus.OK, None, True) for r in range(1, 6)]
        await client.close()


async def test_pipelined_durable_merges_wait_for_the_disk_one_at_a_time_in_order(
    tmp_path: Path, disk: threading.Event
) -> None:
    async with _CountingHub(port=0, db=tmp_path / "hub") as hub:
        client = await _join(hub, "pipelined", "w")
        state = hub.rooms["pipelined"].state
        disk.clear()
        taken = hub.taken
        for request_id in range(1, 5):
            await client.send_merge(request_id, f"k{request_id}", request_id)
        await eventually(lambda: state.get("k1") == 1)
        await asyncio.sleep(0.3)
        assert hub.taken == taken + 1  # the first; the others wait in the handler's loop
        assert state.get("k2") is None, "the second merge was judged before the first was stored"
        assert not client.answers
        disk.set()
        await eventually(lambda: len(client.answers) == 4)
        assert client.answers == [(r, p.MergeStatus.OK, None, True) for r in range(1, 5)]
        await client.close()


async def test_many_connections_waiting_for_their_answers_each_find_them_in_the_file(
    tmp_path: Path,
) -> None:
    """Merges of several connections judged in one batch: none is answered before stored."""
    async with _CountingHub(port=0, db=tmp_path / "hub") as hub:
        clients = [await _join(hub, "many", f"w{i}") for i in range(6)]

        async def run(client: _Client) -> None:
            for request_id in range(1, 21):
                await client.send_merge(request_id, f"{client.writer}-{request_id}", request_id)
                await eventually(lambda r=request_id: len(client.answers) == r)  # type: ignore[misc]

        await asyncio.gather(*(run(c) for c in clients))
        assert hub.taken >= 6 * 19
        for client in clients:
            assert client.answers == [(r, p.MergeStatus.OK, None, True) for r in range(1, 21)]
            await client.close()


async def test_a_failing_store_answers_a_taken_merge_with_the_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _CountingHub(port=0, db=tmp_path / "hub") as hub:
        client = await _join(hub, "broken", "w")

        def broken(self: storage.Store, batch: Any) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(storage.Store, "_commit", broken)
        taken = hub.taken
        await client.send_merge(1, "x", 1)
        await eventually(lambda: len(client.answers) == 1)
        assert hub.taken == taken + 1
        assert client.answers == [(1, p.MergeStatus.ERROR, "storage", False)]
        await client.close()
