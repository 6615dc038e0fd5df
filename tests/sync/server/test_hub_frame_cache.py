"""Frames written by the room's fan-out: framed once, the same bytes as websockets frames them."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode

from sync.server._framing import FrameCache, frame_binary, write_frames


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_frame_binary_is_what_websockets_serializes(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert frame_binary(payload) == Frame(Opcode.BINARY, payload).serialize(mask=False)


async def _round_trip(compression: str | None) -> tuple[list[list[str | bytes]], FrameCache]:
    payloads = [b"update" * 30, b"x" * 200, b"y" * 70_000]
    cache: FrameCache = {}
    joined: list[ServerConnection] = []
    ready = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        joined.append(ws)
        if len(joined) == 2:
            ready.set()
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0, compression=compression) as server:
        port = server.sockets[0].getsockname()[1]
        url = f"ws://127.0.0.1:{port}"
        async with (
            connect(url, compression=compression) as a,
            connect(url, compression=compression) as b,
        ):
            await ready.wait()
            for ws in joined:
                write_frames(ws, payloads, cache)
            return [[await c.recv() for _ in payloads] for c in (a, b)], cache


@pytest.mark.parametrize("compression", [None, "deflate"])
def test_every_connection_receives_every_frame(compression: str | None) -> None:
    received, cache = asyncio.run(_round_trip(compression))
    expected = [b"update" * 30, b"x" * 200, b"y" * 70_000]
    assert received == [expected, expected]
    # framed once for both connections; a compressing connection frames through websockets
    assert len(cache) == (3 if compression is None else 0)
    for payload, framed in cache.values():
        assert framed == frame_binary(payload)
