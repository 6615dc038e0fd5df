"""Bounded memory: slow readers are dropped, awareness is capped, shutdown never hangs."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from hubs import eventually
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire import protocol as p
from sync.wire.lib0 import encode_var_string, encode_var_uint

HANDSHAKE = (
    "GET /{room} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def awareness(client: int, clock: int, size: int) -> bytes:
    """An awareness update announcing ``client`` with a state of about ``size`` bytes."""
    state = json.dumps({"user": {"name": "x" * size}})
    return (
        encode_var_uint(1) + encode_var_uint(client) + encode_var_uint(clock)
    ) + encode_var_string(state)


class NeverReads:
    """A websocket client that completes the handshake, then never reads again."""

    def __init__(self, port: int, room: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(HANDSHAKE.format(room=room).encode())
        self.sock.settimeout(5)
        assert self.sock.recv(12) == b"HTTP/1.1 101"

    def close(self) -> None:
        self.sock.close()


async def test_a_slow_reader_is_dropped_past_its_byte_bound_and_its_queue_freed() -> None:
    bound = 256 * 1024
    limits = Limits(max_outbox_bytes=bound)
    async with Hub(port=0, limits=limits) as hub:
        slow = [await asyncio.to_thread(NeverReads, hub.port, "busy") for _ in range(2)]
        try:
            async with ws_connect(hub.url("busy"), compression=None, max_size=None) as fast:
                await eventually(lambda: len(hub.rooms["busy"].sessions) == 3)
                sessions = list(hub.rooms["busy"].sessions.values())
                most_held = 0
                # 300 awareness messages of 60 KiB: 18 MB for each slow reader if unbounded
                for clock in range(300):
                    await fast.send(p.encode_awareness(awareness(7, clock, 60_000)))
                    most_held = max(most_held, *(s.outbox.size for s in sessions))
                    if len(hub.rooms["busy"].sessions) == 1:
                        break
                await eventually(lambda: len(hub.rooms["busy"].sessions) == 1, timeout=5)
                assert most_held <= bound
                assert all(s.overflowed and s.outbox.size == 0 for s in sessions[:2])
                # the client that reads goes on
                await fast.send(p.encode_sync_step1(b"\x00"))
                async with asyncio.timeout(5):
                    while True:
                        if isinstance(p.decode_message(await fast.recv()), p.SyncStep2):  # type: ignore[arg-type]
                            break
        finally:
            for client in slow:
                client.close()


async def test_awareness_messages_over_their_limit_close_with_1009() -> None:
    async with Hub(port=0, limits=Limits(max_awareness=1024)) as hub:
        async with ws_connect(hub.url("aw"), compression=None) as ws:
            await ws.send(p.encode_awareness(awareness(1, 1, 100)))
            await eventually(lambda: len(hub.rooms["aw"].awareness) == 1)
            await ws.send(p.encode_awareness(awareness(1, 2, 2000)))
            with pytest.raises(ConnectionClosed) as info:
                async with asyncio.timeout(5):
                    while True:
                        await ws.recv()
            assert info.value.rcvd is not None and info.value.rcvd.code == 1009
        await eventually(lambda: not hub.rooms["aw"].awareness)


async def test_stop_does_not_wait_for_clients_that_never_read() -> None:
    hub = Hub(port=0, limits=Limits(max_outbox_bytes=64 * 2**20))
    await hub.start()
    slow = [await asyncio.to_thread(NeverReads, hub.port, "stuck") for _ in range(2)]
    try:
        async with ws_connect(hub.url("stuck"), compression=None) as fast:
            await eventually(lambda: len(hub.rooms["stuck"].sessions) == 3)
            for clock in range(100):  # fill the slow readers' socket buffers
                await fast.send(p.encode_awareness(awareness(7, clock, 60_000)))
            await asyncio.sleep(0.2)
            started = time.monotonic()
            await hub.stop()
            took = time.monotonic() - started
        assert took < 1.5, took
        assert not hub.rooms
    finally:
        for client in slow:
            client.close()
