"""Token lifetime on open connections: a connection lives no longer than its token.

A token is checked at the handshake; the connection it opened is closed with
1008 (policy violation, reason ``access token expired``) when the token's
``exp`` passes, after a y-protocols permission-denied message naming the
reason, and any message that arrives after ``exp`` is refused before it is
carried out. A client that wants to stay connected reconnects with a fresh token.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from websockets.asyncio.server import ServerConnection, broadcast

from sync.server.auth import Grant
from sync.wire import protocol as p
from sync.wire.errors import CloseCode

__all__ = ["EXPIRED_TOKEN", "TOKEN_EXPIRED_REASON", "expire_at", "token_expired"]

EXPIRED_TOKEN: Final = "expired_token"
"""The code of the refusal of a connection whose token expired."""
TOKEN_EXPIRED_REASON: Final = p.TOKEN_EXPIRED_REASON
"""The close reason (and permission-denied reason) sent when a token expires."""


def token_expired(grant: Grant, now: float | None = None) -> bool:
    """True once ``grant``'s token has expired (``now``: unix seconds, default the clock)."""
    return (time.time() if now is None else now) >= grant.expires


async def expire_at(ws: ServerConnection, expires: float) -> None:
    """Close ``ws`` with 1008 when the unix time ``expires`` passes (cancel to keep it)."""
    await asyncio.sleep(max(0.0, expires - time.time()))
    broadcast((ws,), p.encode_permission_denied(TOKEN_EXPIRED_REASON))  # never waits
    await ws.close(CloseCode.POLICY_VIOLATION, TOKEN_EXPIRED_REASON)
