"""Decode a PNG's pixels (8-bit RGB/RGBA, as browsers write screenshots) with zlib alone."""

from __future__ import annotations

import struct
import zlib

__all__ = ["png_colours"]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def png_colours(data: bytes) -> tuple[int, int, set[bytes]]:
    """``(width, height, distinct pixel values)`` of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), f"unsupported PNG (depth {depth}, type {colour})"
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    colours: set[bytes]
    previous, colours, pos = bytearray(stride), set(), 0
    for _ in range(height):
        filter_type, row = raw[pos], bytearray(raw[pos + 1 : pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            left = row[i - bpp] if i >= bpp else 0
            up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
            add = (0, left, up, (left + up) // 2, _paeth(left, up, corner))[filter_type]
            row[i] = (row[i] + add) & 0xFF
        colours.update(bytes(row[i : i + bpp]) for i in range(0, stride, bpp * 7))
        previous = row
    return width, height, colours
