"""Awareness payloads (y-protocols ``awareness.js``): just enough to retire a peer.

An awareness update is ``varuint n`` then, ``n`` times, ``varuint client_id``,
``varuint clock``, ``varstring state_json``. A state of ``null`` with a higher
clock tells every peer that the client is gone. The hub relays payloads as
they are; when a connection closes it sends this removal for the clients that
connection announced, as the reference server does.
"""

from __future__ import annotations

from sync.wire.errors import ProtocolError
from sync.wire.lib0 import Reader, encode_var_string, encode_var_uint

__all__ = ["announced_clients", "removal_update", "safe_clients"]


def announced_clients(payload: bytes) -> dict[int, int]:
    """``{client_id: clock}`` of an awareness update; ProtocolError if malformed."""
    reader = Reader(payload)
    clients: dict[int, int] = {}
    for _ in range(reader.read_var_uint()):
        client = reader.read_var_uint()
        clock = reader.read_var_uint()
        reader.read_var_string()
        clients[client] = clock
    reader.expect_end()
    return clients


def removal_update(clients: dict[int, int]) -> bytes:
    """An awareness update that sets each client's state to ``null`` (clock + 1)."""
    parts = [encode_var_uint(len(clients))]
    for client, clock in clients.items():
        parts += [encode_var_uint(client), encode_var_uint(clock + 1), encode_var_string("null")]
    return b"".join(parts)


def safe_clients(payload: bytes) -> dict[int, int]:
    """Like :func:`announced_clients`, but ``{}`` for a payload that does not parse."""
    try:
        return announced_clients(payload)
    except ProtocolError:
        return {}
