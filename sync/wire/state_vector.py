"""Yjs state vectors (the revision tokens on the wire): the wire's face of the core's codec.

A state vector is ``varuint n`` followed by ``n`` pairs ``(varuint client_id, varuint
clock)``; Yjs and pycrdt (``Doc.get_state()``) both write it this way, and an empty
document's state vector is the single byte ``00``. There is one decoder in the project,
:meth:`crdt_state.VersionVector.from_state` with ``strict=True``; this module only maps its
:class:`~crdt_state.InvalidUpdate` to the wire's ``invalid_state_vector``. Encode with
:meth:`crdt_state.VersionVector.to_state`.
"""

from __future__ import annotations

from crdt_state import InvalidUpdate, VersionVector
from sync.wire.errors import ErrorCode, ProtocolError

__all__ = ["decode_state_vector", "validate_state_vector"]


def decode_state_vector(data: bytes) -> VersionVector:
    """Decode a state vector from the network with the core's strict rules.

    Args:
        data: the encoded state vector.

    Returns:
        The version vector (clients with clock 0 are dropped, as everywhere).

    Raises:
        ProtocolError: ``invalid_state_vector`` for truncated input, trailing bytes, a
            varuint that is not canonical or exceeds ``2**53 - 1``, a count of entries the
            bytes cannot hold, or a client id listed twice.
    """
    try:
        return VersionVector.from_state(data, strict=True)
    except InvalidUpdate as exc:
        reason = exc.details.get("reason", "malformed")
        raise ProtocolError(
            ErrorCode.INVALID_STATE_VECTOR, f"malformed state vector ({reason}: {exc})"
        ) from None


def validate_state_vector(data: bytes) -> bytes:
    """Return ``data`` unchanged if it is a well-formed state vector.

    Raises:
        ProtocolError: ``invalid_state_vector``, as :func:`decode_state_vector`.
    """
    decode_state_vector(data)
    return data
