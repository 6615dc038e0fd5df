"""What a hub accepts as its secret, and where it may run without one (pure logic).

A hub checks access tokens with an HMAC secret. An empty secret would make every
token signed with the empty key valid (write access to ``*``), so it is refused.
Without any secret every client may read and write every room: allowed on a
loopback address (a developer's machine) with a warning, and on any other
address only when asked for explicitly (``Hub(insecure=True)``; on the command
line ``--insecure --insecure-public``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from sync.wire.errors import SyncError

__all__ = ["HubConfigError", "check_secret", "is_loopback", "read_secret_file"]


class HubConfigError(SyncError, ValueError):
    """A hub configuration that is refused before it starts.

    Attributes:
        code: ``empty_secret`` (a secret that is the empty string, or an empty secret file),
            ``insecure_host`` (no secret on a non-loopback address without ``insecure``),
            ``secret_file`` (the secret file cannot be read); for a cluster hub
            ``cluster_options`` (``redis`` without ``postgres`` or the reverse),
            ``redis_url`` (not a Redis URL, a path that is not a database number, or a
            database the server does not have), ``redis_auth`` (Redis refused the user or
            password, or the user lacks a permission), ``postgres_dsn`` (not a PostgreSQL
            DSN), ``postgres_privileges`` (the PostgreSQL role may not create or use the
            cluster's tables);
            ``event_loop`` (``--loop uvloop`` where uvloop is not installed);
            ``db`` (``db=""``, which names no directory, or a directory where room files
            cannot be created: a file, read-only).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def is_loopback(host: str) -> bool:
    """True when ``host`` only listens on the machine itself (``localhost``, 127.0.0.0/8, ::1).

    An empty host or ``0.0.0.0`` / ``::`` listen on every interface: not loopback.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_secret(secret: str | None, host: str, *, insecure: bool) -> None:
    """Refuse (:class:`HubConfigError`) a secret or a lack of one the hub must not run with.

    Args:
        secret: the HMAC secret, or ``None`` for a hub without access control.
        host: the address the hub listens on.
        insecure: allow running without a secret on a non-loopback address.

    Raises:
        HubConfigError: ``empty_secret`` for ``""`` (or only white space);
            ``insecure_host`` for no secret on a non-loopback host without ``insecure``.
    """
    if secret is not None:
        if not secret.strip():
            raise HubConfigError(
                "empty_secret",
                "the hub secret is empty: every token signed with an empty key would be "
                "valid; give a non-empty secret (or no secret at all, on loopback only)",
            )
        return
    if not insecure and not is_loopback(host):
        raise HubConfigError(
            "insecure_host",
            f"refusing to listen on {host!r} without a secret: every client could read and "
            "write every room; give a secret, or pass insecure=True (--insecure-public)",
        )


def read_secret_file(path: str | Path) -> str:
    """The secret held in the file at ``path``, without surrounding white space.

    Raises:
        HubConfigError: ``secret_file`` if it cannot be read, ``empty_secret`` if it is empty.
    """
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise HubConfigError(
            "secret_file", f"cannot read the secret file {str(path)!r}: {exc}"
        ) from exc
    if not secret:
        raise HubConfigError("empty_secret", f"the secret file {str(path)!r} is empty")
    return secret
