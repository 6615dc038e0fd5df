"""Yjs state vectors (the revision tokens on the wire): strict validation and codec.

A state vector is ``varuint n`` followed by ``n`` pairs ``(varuint client_id, varuint
clock)``; Yjs and pycrdt (``Doc.get_state()``) both write it this way, and an empty
document's state vector is the single byte ``00``. This module knows nothing about version
vector semantics (ordering, comparison): that belongs to ``crdt_state``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sync.wire.errors import ErrorCode, ProtocolError
from sync.wire.lib0 import Reader, encode_var_uint

__all__ = ["decode_state_vector", "encode_state_vector", "validate_state_vector"]


def decode_state_vector(data: bytes) -> dict[int, int]:
    """Decode a state vector into ``{client_id: clock}``.

    Raises :class:`ProtocolError` (``invalid_state_vector``) for truncated input, trailing
    bytes, a bad varuint, or a client id listed twice.
    """
    reader = Reader(data)
    try:
        count = reader.read_var_uint()
        # Each entry takes at least two bytes: refuse absurd counts before looping.
        if count * 2 > reader.remaining:
            raise ProtocolError(ErrorCode.TRUNCATED, f"{count} entries cannot fit")
        clocks: dict[int, int] = {}
        for _ in range(count):
            client = reader.read_var_uint()
            clock = reader.read_var_uint()
            if client in clocks:
                raise ProtocolError(ErrorCode.INVALID_STATE_VECTOR, f"client {client} twice")
            clocks[client] = clock
        reader.expect_end()
    except ProtocolError as exc:
        if exc.code is ErrorCode.INVALID_STATE_VECTOR:
            raise
        raise ProtocolError(
            ErrorCode.INVALID_STATE_VECTOR, f"malformed state vector ({exc})"
        ) from None
    return clocks


def validate_state_vector(data: bytes) -> bytes:
    """Return ``data`` unchanged if it is a well-formed state vector, else raise."""
    decode_state_vector(data)
    return data


def encode_state_vector(clocks: Mapping[int, int]) -> bytes:
    """Encode ``{client_id: clock}`` as a state vector, entries sorted by client id.

    Other writers order entries differently (Yjs: client id descending; yrs: hash order),
    so equal states may have different bytes: compare decoded mappings, never raw tokens.
    """
    parts = [encode_var_uint(len(clocks))]
    for client in sorted(clocks):
        parts.append(encode_var_uint(client))
        parts.append(encode_var_uint(clocks[client]))
    return b"".join(parts)
