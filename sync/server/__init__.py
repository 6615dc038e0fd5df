"""The server layer: the websocket hub and what it is made of.

- :mod:`sync.server.hub`: :class:`Hub`, the asyncio websocket server of rooms;
- :mod:`sync.server.peer`: :class:`HubPeer`, one connection's protocol state, sans I/O;
- :mod:`sync.server.auth`: access tokens (mint, verify);
- :mod:`sync.server.limits`: :class:`Limits`;
- :mod:`sync.server.cluster`: foundations of several hubs sharing rooms (Redis, PostgreSQL).

It never imports :mod:`sync.client`: what both need lives in :mod:`sync.wire`.
"""

from sync.server._security import HubConfigError
from sync.server.auth import AuthError, Grant, mint_token, verify_token
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.server.peer import HubPeer, PeerRefused

__all__ = [
    "AuthError",
    "Grant",
    "Hub",
    "HubConfigError",
    "HubPeer",
    "Limits",
    "PeerRefused",
    "mint_token",
    "verify_token",
]
