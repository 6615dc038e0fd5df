"""Handshakes the hub refuses cleanly: odd tokens, odd paths, handshakes websockets refuses."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from hubs import SECRET, eventually
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from sync.server.auth import mint_token
from sync.server.hub import Hub


async def _status(url: str, **kwargs: object) -> int:
    try:
        async with ws_connect(url, **kwargs):  # type: ignore[arg-type]
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_a_non_ascii_token_is_refused_with_401(secured: Hub) -> None:
    url = secured.url("team/a")
    assert await _status(url + "?token=" + quote("é.ü")) == 401
    assert await _status(url + "?token=" + quote("payload.sïgnature")) == 401
    headers = {"Authorization": "Bearer " + quote("ünïcode")}
    assert await _status(url, additional_headers=headers) == 401
    good = mint_token(SECRET, "team/*", "write", 60)
    assert await _status(url + f"?token={good}") == 101


async def _raw_handshake(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(5):
            return await reader.read(1024)
    finally:
        writer.close()


async def test_handshakes_websockets_refuses_after_auth_leak_no_grant(secured: Hub) -> None:
    token = mint_token(SECRET, "*", "write", 60)
    no_key = (
        f"GET /room?token={token} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
    for _ in range(200):
        answer = await _raw_handshake(secured.port, no_key)
        assert answer.startswith(b"HTTP/1.1 400")
    await eventually(lambda: not secured._admission.grants)
    # a client that drops the connection right after sending its handshake leaks nothing
    ok = (
        f"GET /room?token={token} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
    for _ in range(50):
        _, writer = await asyncio.open_connection("127.0.0.1", secured.port)
        writer.write(ok)
        writer.close()
    await asyncio.sleep(0.2)
    await eventually(lambda: not secured._admission.grants)


async def test_a_room_name_too_long_for_a_file_name_is_refused_at_the_handshake(
    tmp_path: object,
) -> None:
    async with Hub(port=0, db=str(tmp_path)) as hub:
        # 121 characters, but 241 bytes once '/' is escaped in the room's file name
        assert await _status(hub.url("a/" * 60 + "a")) == 414
        assert await _status(hub.url("b" * 250)) == 414
        assert not hub.rooms
        fits = "c" * 200
        async with ws_connect(hub.url(fits)):
            await eventually(lambda: fits in hub.rooms)


async def test_room_names_are_the_path_as_y_websocket_reads_it(hub: Hub) -> None:
    # y-websocket's server: docName = req.url.slice(1).split('?')[0]
    for path in ("//etc/passwd", "/a//b", "/team/x/?token=t", "/plain"):
        expected = path[1:].split("?")[0]
        async with ws_connect(f"ws://127.0.0.1:{hub.port}{path}"):
            await eventually(lambda name=expected: name in hub.rooms)  # type: ignore[misc]
    assert "passwd" not in hub.rooms and "etc/passwd" not in hub.rooms
    assert await _status(f"ws://127.0.0.1:{hub.port}/") == 400
    assert await _status(f"ws://127.0.0.1:{hub.port}/a%2Fb") == 400
