"""Hub URLs of a remote agent: checked up front, with the token added, and masked.

A room may be served by several hubs (a cluster): the client is given one URL or a
list, all naming the same room (the URL path). The access token travels as the
``token`` query parameter; it never appears in logs, reprs or error messages:
:func:`mask` hides it in any text shown to people.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from sync.wire.errors import InvalidHubURL
from sync.wire.rooms import is_room_name

__all__ = ["MASK", "hub_urls", "mask", "masked_logger", "with_token"]

MASK: Final = "***"
"""What a token is shown as."""
_TOKEN_PARAM: Final = re.compile(r"((?:^|[?&;])token=)[^&;#\s'\"]*")


def mask(text: str, token: str | None = None) -> str:
    """``text`` with ``token`` and every ``token=`` query value replaced by :data:`MASK`."""
    if token:
        text = text.replace(token, MASK)
    return _TOKEN_PARAM.sub(rf"\g<1>{MASK}", text)


def hub_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """The hub URLs of one room, checked: ``ws://`` or ``wss://``, a host, one room path.

    Args:
        url: one URL, or the URLs of the same room on several hubs.

    Returns:
        The URLs, in order.

    Raises:
        InvalidHubURL: no URL, a URL that is not ``ws://host/...`` or ``wss://host/...``
            (or has a ``#fragment``), a URL naming no room or a room a hub refuses
            (:mod:`sync.wire.rooms`), or URLs naming different rooms (different paths).
            Its message shows the URLs with their tokens masked.
    """
    urls = (url,) if isinstance(url, str) else tuple(url) if isinstance(url, Sequence) else ()
    if not urls:
        raise InvalidHubURL(f"a hub URL or a list of hub URLs is needed, got {mask(repr(url))}")
    for one in urls:
        try:
            scheme = urlsplit(one).scheme if isinstance(one, str) else None
        except ValueError as exc:  # an unclosed IPv6 bracket, say
            raise InvalidHubURL(f"bad hub URL {mask(repr(one))}: {exc}") from None
        if scheme not in ("ws", "wss"):
            raise InvalidHubURL(f"a hub URL starts with ws:// or wss://, got {mask(repr(one))}")
        try:
            host = urlsplit(one).hostname
            urlsplit(one).port  # noqa: B018 (raises ValueError for a bad port)
        except ValueError as exc:
            raise InvalidHubURL(f"bad hub URL {mask(repr(one))}: {exc}") from None
        if not host:
            raise InvalidHubURL(f"the hub URL names no host: {mask(repr(one))}")
        if "#" in one:  # the token goes into the query: websockets would quote it whole
            raise InvalidHubURL(f"a hub URL has no '#fragment': {mask(repr(one))}")
        room = urlsplit(one).path[1:]
        if not room:
            raise InvalidHubURL(
                f"the hub URL names no room (ws://host:port/<room>): {mask(repr(one))}"
            )
        if not is_room_name(room):
            raise InvalidHubURL(
                f"the hub URL's room {room!r} has characters a hub refuses (a room name is"
                f" made of A-Z a-z 0-9 . _ ~ - /): {mask(repr(one))}"
            )
    rooms = {urlsplit(one).path for one in urls}  # exactly: a hub tells "a/" from "a"
    if len(rooms) > 1:
        shown = mask(repr(list(urls)))
        raise InvalidHubURL(
            f"the hub URLs must name the same room (the same path, to the last '/'), got {shown}"
        )
    return urls


def with_token(url: str, token: str | None) -> str:
    """``url`` with ``token`` added as the ``token`` query parameter (when there is one).

    Raises:
        InvalidHubURL: ``url`` has a ``token`` parameter of its own as well.
    """
    if not token:
        return url
    parts = urlsplit(url)
    if "token" in parse_qs(parts.query):  # the hub would get two and refuse both
        raise InvalidHubURL(
            f"the hub URL carries a token already and token= gives another: {mask(url, token)}"
        )
    query = (parts.query + "&" if parts.query else "") + urlencode({"token": token})
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


class _MaskTokens(logging.Filter):
    """Mask ``token=`` query values in every log record.

    The websocket library logs the request line of each handshake at DEBUG level.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "token=" in text:
            record.msg, record.args = mask(text), ()
        return True


def masked_logger(name: str) -> logging.Logger:
    """The logger ``name``, masking tokens in what it logs (for the websocket library)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _MaskTokens) for f in logger.filters):
        logger.addFilter(_MaskTokens())
    return logger
