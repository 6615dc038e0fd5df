"""Writing binary frames to a server connection, each framed once however many receive it.

A room sends the same update frame to every session of a round. ``websockets``
frames a message per connection (a ``Frame`` object, its ``serialize``, a
``BytesIO``); a server frame without extensions is only a 2-10 byte header and
the payload (no mask), so :func:`write_frames` builds those bytes itself, keeps
them in a cache the caller shares between the connections of a round, and
writes them to the transport in one call. A connection whose protocol would
frame differently or has something of its own to send first (an extension such
as compression, debug logging, an unfinished fragmented message, pending
protocol writes, a client side) goes through ``websockets`` as before: the bytes
on the wire are the same either way.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from websockets.asyncio.server import ServerConnection, broadcast
from websockets.protocol import SERVER, State

__all__ = ["FrameCache", "frame_binary", "write_frames"]

FrameCache = dict[int, tuple[bytes, bytes]]
"""Framed bytes by ``id(payload)``, with the payload (which keeps the id valid)."""

_FIN_BINARY = 0x82  # FIN bit and the binary opcode


def frame_binary(payload: bytes) -> bytes:
    """``payload`` as one unmasked, final binary websocket frame (RFC 6455 §5.2)."""
    n = len(payload)
    if n < 126:
        return bytes((_FIN_BINARY, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", _FIN_BINARY, 126, n) + payload
    return struct.pack("!BBQ", _FIN_BINARY, 127, n) + payload


def _framed(payload: bytes, cache: FrameCache | None) -> bytes:
    if cache is None:
        return frame_binary(payload)
    hit = cache.get(id(payload))
    if hit is not None and hit[0] is payload:
        return hit[1]
    data = frame_binary(payload)
    cache[id(payload)] = (payload, data)
    return data


def write_frames(
    ws: ServerConnection, frames: Sequence[bytes], cache: FrameCache | None = None
) -> None:
    """Write binary ``frames`` to ``ws`` in one socket write, as ``websockets`` frames them.

    Frames to a connection that is not open, or that is sending a fragmented
    message, are dropped (as ``websockets.broadcast`` drops them); a failed write is
    logged on the connection's logger and otherwise ignored (its handler sees the
    broken connection). ``cache`` may be shared by the calls of one fan-out: a
    payload given to several connections is framed once.
    """
    protocol = ws.protocol
    if protocol.state is not State.OPEN or ws.send_in_progress is not None:
        return  # closing: frames to a closing connection are dropped, like broadcast()
    if (
        protocol.side is not SERVER
        or protocol.extensions
        or protocol.debug
        or protocol.writes
        or protocol.expect_continuation_frame
    ):
        _write_through_protocol(ws, frames)
        return
    try:
        if len(frames) == 1:
            ws.transport.write(_framed(frames[0], cache))
        else:
            ws.transport.write(b"".join([_framed(frame, cache) for frame in frames]))
    except Exception as exc:  # the connection broke: its handler sees it and cleans up
        ws.logger.warning("could not write to connection: %s", exc)


def _write_through_protocol(ws: ServerConnection, frames: Sequence[bytes]) -> None:
    """:func:`write_frames` framed by ``websockets`` itself (any extension applies)."""
    if len(frames) == 1:
        broadcast((ws,), frames[0])
        return
    try:
        for frame in frames:
            ws.protocol.send_binary(frame)
        data = ws.protocol.data_to_send()
        ws.transport.write(b"".join(data))
    except Exception as exc:
        ws.logger.warning("could not write to connection: %s", exc)
