"""The ``XADD`` of a forwarded write, packed from parts computed once per session.

A hub forwards most of its sessions' writes to the rooms' owners on other hubs: each is
an ``XADD crdt:<cluster>:{room}:in * e <entry>`` whose entry (:mod:`~sync.server.cluster.streams`)
starts with the same bytes for every write of one session and kind (format, kind, hub,
session, agent, writer scope). :class:`InCommands` keeps those bytes, and the command's
own head, per session and kind, so a write costs one concatenation instead of an
:class:`~sync.server.cluster.streams.InEntry`, its encoding and the command's packing
(~28 µs → a few on the loaded 2-core machine).
"""

from __future__ import annotations

from typing import Final

from sync.server._room import Session
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace
from sync.server.cluster.link import bulk
from sync.server.cluster.streamio import stream_key
from sync.server.cluster.streams import MERGE, UPDATE, in_header

__all__ = ["InCommands"]

_MAX: Final = 65_536
"""Most (room, session, kind) parts kept; past it they are all dropped and made again."""


class InCommands:
    """Packed ``XADD`` commands of the ``in`` entries of one hub's sessions.

    Args:
        hub: the hub's id (in every entry: where the owner sends the answer).
        space: the cluster's key space, which names the ``in`` streams.
    """

    def __init__(self, hub: str, space: KeySpace = DEFAULT_SPACE) -> None:
        self.hub = hub
        self.space = space
        self._parts: dict[tuple[str, int, str], tuple[bytes, bytes]] = {}

    def command(self, room: str, session: Session, kind: str, data: bytes) -> bytes:
        """``XADD`` of ``session``'s write ``data`` (``kind``) to ``room``'s ``in`` stream.

        The command in Redis's protocol, as :func:`~sync.server.cluster.link.pack` makes
        it; its entry is :func:`~sync.server.cluster.streams.encode_in`'s.

        Raises:
            ValueError: ``kind`` is not a write's kind.
        """
        parts = self._parts.get((room, session.id, kind))
        if parts is None:
            if len(self._parts) >= _MAX:
                self._parts.clear()
            key = stream_key(room, "in", self.space)
            # XADD key * e <entry>: five bulk strings, the last one made per write below
            head = b"*5\r\n" + b"".join(map(bulk, (b"XADD", key, b"*", b"e")))
            header = in_header(kind, self.hub, session.id, session.label, session.writer)
            parts = self._parts[(room, session.id, kind)] = (head, header)
        head, header = parts
        return b"%b$%d\r\n%b%b\r\n" % (head, len(header) + len(data), header, data)

    def forget(self, room: str, session: int) -> None:
        """Drop the parts of session ``session`` of ``room`` (it left)."""
        for kind in (UPDATE, MERGE):
            self._parts.pop((room, session, kind), None)
