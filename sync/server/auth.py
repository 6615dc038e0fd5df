"""Per-room access tokens signed with the hub's secret (HMAC-SHA256), pure logic.

A token is ``<payload>.<signature>``, both URL-safe base64 without padding;
the payload is compact JSON ``{"room": pattern, "role": "read"|"write",
"exp": unix seconds}``. ``room`` is a glob over room names matched with
:func:`fnmatch.fnmatchcase` (``"triage/*"``, ``"*"``; ``*`` also matches
``/``, so ``"triage/*"`` covers ``triage/a/b`` too). Only a token for exactly ``"*"``
is an admin token (the inspector's room list): ``"?"`` or ``"[*]"`` match the text
``*`` but are not. The hub checks a token during the
websocket handshake: missing or malformed → HTTP 401, bad signature or
expired → 401, valid but for another room → 403.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from sync.wire.errors import AuthError

__all__ = ["AuthError", "Grant", "Role", "mint_token", "verify_token"]

Role = Literal["read", "write"]


@dataclass(frozen=True)
class Grant:
    """What a valid token allows."""

    room: str
    role: Role
    expires: float

    @property
    def can_write(self) -> bool:
        """True when the token allows merges and updates, not only reads."""
        return self.role == "write"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode("ascii"), hashlib.sha256).digest())


def mint_token(secret: str, room: str, role: Role, ttl: float, *, now: float | None = None) -> str:
    """A token for rooms matching ``room`` with ``role``, valid for ``ttl`` seconds."""
    if not secret:
        raise ValueError("a secret is needed to mint tokens")
    if role not in ("read", "write"):
        raise ValueError("role must be 'read' or 'write'")
    if ttl <= 0:
        raise ValueError("ttl must be positive")
    expires = int((time.time() if now is None else now) + ttl)
    payload = _b64(
        json.dumps({"room": room, "role": role, "exp": expires}, separators=(",", ":")).encode()
    )
    return f"{payload}.{_sign(secret, payload)}"


def verify_token(secret: str, token: str | None, room: str, *, now: float | None = None) -> Grant:
    """The :class:`Grant` of ``token`` for ``room``, or :class:`AuthError`."""
    if not token:
        raise AuthError(401, "missing_token", "an access token is required")
    if not token.isascii():
        raise AuthError(401, "malformed_token", "malformed access token")
    payload, dot, signature = token.partition(".")
    if not dot or not payload or not signature:
        raise AuthError(401, "malformed_token", "malformed access token")
    if not hmac.compare_digest(_sign(secret, payload), signature):
        raise AuthError(401, "bad_signature", "access token signature does not match")
    try:
        claims = json.loads(_unb64(payload))
        pattern, role, expires = claims["room"], claims["role"], float(claims["exp"])
    except (ValueError, KeyError, TypeError) as exc:
        raise AuthError(401, "malformed_token", "malformed access token payload") from exc
    if not isinstance(pattern, str) or role not in ("read", "write"):
        raise AuthError(401, "malformed_token", "malformed access token claims")
    if (time.time() if now is None else now) >= expires:
        raise AuthError(401, "expired_token", "access token expired")
    if room == "*" and pattern != "*":  # "*" names no room (see sync.wire.rooms): every room
        raise AuthError(403, "wrong_room", "an admin token (room '*') is required")
    if not fnmatchcase(room, pattern):
        raise AuthError(403, "wrong_room", f"token is not valid for room {room!r}")
    return Grant(room=room, role=role, expires=expires)
