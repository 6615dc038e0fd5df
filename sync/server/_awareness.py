"""A room's awareness: every client's state by the clock rules, and who controls it.

The hub keeps a room's awareness as y-websocket's server does: one map of client id to
(clock, state) for the whole room (:class:`~sync.wire.awareness.AwarenessStates`), an
incoming entry taken only when its clock is newer, and for each connection the clients
it *controls*: those whose state an update of that connection set. A stock client sends
back every change it applies, other peers' states included, but those echoes carry the
clocks the room holds already, so they change nothing and control nothing. When a
connection closes, exactly the clients it controls are removed (at their clocks).

A connection may control at most :data:`MAX_CLIENTS_PER_CONNECTION` clients: an update
that would take it past that is refused whole (the hub closes the connection). Entries
from another hub of a cluster are controlled by no connection of this hub: their removal
comes from that hub when its connection closes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from sync.wire.awareness import AwarenessStates, Entry, decode_entries, encode_entries

__all__ = ["MAX_CLIENTS_PER_CONNECTION", "RoomAwareness", "TooManyClients"]

MAX_CLIENTS_PER_CONNECTION: Final = 64
"""Clients whose awareness state one connection may set (a stock client sets one)."""


class TooManyClients(Exception):
    """An awareness update would make its connection control too many clients."""


class RoomAwareness:
    """The awareness of one room (see the module doc). Event-loop thread only."""

    def __init__(self, max_controlled: int = MAX_CLIENTS_PER_CONNECTION) -> None:
        self.states = AwarenessStates()
        self._owner: dict[int, int | None] = {}  # client with a state -> its connection
        self._controlled: dict[int, set[int]] = {}  # connection -> the clients it controls
        self._max = max_controlled

    def __len__(self) -> int:
        """How many clients have a state."""
        return len(self.states)

    def receive(
        self, payload: bytes, connection: int | None, max_bytes: int | None = None
    ) -> bytes | None:
        """Apply an awareness update that came from ``connection`` (``None``: another hub).

        ``max_bytes``: the most bytes of state text the clients ``connection`` controls may
        hold together (the hub's ``max_awareness``: a stock client's one state fits, and a
        connection cannot hold many states of that size).

        Returns:
            The update to relay (the entries that changed the room's states, re-encoded),
            or ``None`` when none did.

        Raises:
            ProtocolError: the update is malformed (nothing is applied).
            TooManyClients: ``connection`` would control more than its share (nothing is
                applied).
        """
        planned = self.states.plan(decode_entries(payload))
        if connection is not None:
            self._check_share(planned, connection, max_bytes)
        changed = self.states.commit(planned)
        for entry in changed:
            self._give(entry.client, None if entry.removed else connection)
        return encode_entries(changed) if changed else None

    def _check_share(
        self, planned: list[tuple[Entry, bool]], connection: int, max_bytes: int | None
    ) -> None:
        final: dict[int, int | None] = {}  # client -> its state's size after it (None: gone)
        for entry, visible in planned:
            if visible:
                final[entry.client] = None if entry.removed else len(entry.state)
        mine = self._controlled.get(connection, set())
        sizes = [size for size in final.values() if size is not None]
        for client in mine - final.keys():
            kept = self.states.get(client)
            if kept is not None:
                sizes.append(len(kept.state))
        if len(sizes) > self._max:
            raise TooManyClients(
                f"awareness: one connection may set at most {self._max} clients' states"
            )
        if max_bytes is not None and sum(sizes) > max_bytes:
            raise TooManyClients(
                f"awareness: the states one connection sets may hold at most {max_bytes} "
                "bytes together"
            )

    def _give(self, client: int, connection: int | None) -> None:
        """Make ``connection`` the controller of ``client`` (``None``: no connection here)."""
        previous = self._owner.pop(client, None)
        if previous is not None:
            mine = self._controlled.get(previous)
            if mine is not None:
                mine.discard(client)
                if not mine:
                    del self._controlled[previous]
        if client in self.states:
            self._owner[client] = connection
            if connection is not None:
                self._controlled.setdefault(connection, set()).add(client)

    def controlled(self, connection: int) -> frozenset[int]:
        """The clients ``connection`` controls."""
        return frozenset(self._controlled.get(connection, ()))

    def owner(self, client: int) -> int | None:
        """The connection controlling ``client`` (``None``: none of this hub)."""
        return self._owner.get(client)

    def leave(self, connection: int) -> bytes | None:
        """Remove the clients ``connection`` controls; returns that removal, if any."""
        clients = sorted(self._controlled.pop(connection, ()))
        for client in clients:
            self._owner.pop(client, None)
        removed = self.states.remove(clients)
        return encode_entries(removed) if removed else None

    def greeting(self, max_bytes: int | None = None) -> list[bytes]:
        """The updates telling every state the room holds: one, unless past ``max_bytes``.

        With ``max_bytes`` (the hub's ``max_awareness``), the states are split into as
        few updates as keep each within it (a state larger than that goes alone), so a
        client joining a crowded room never gets a message larger than a client may send.
        """
        entries = self.states.entries()
        if not entries:
            return []
        if max_bytes is None:
            return [encode_entries(entries)]
        budget = max_bytes - 3  # what the entries may take: the count is 3 bytes at most
        updates: list[bytes] = []
        batch: list[Entry] = []
        size = 0
        for entry in entries:
            one = len(encode_entries([entry])) - 1  # the entry alone, without its count
            if batch and size + one > budget:
                updates.append(encode_entries(batch))
                batch, size = [], 0
            batch.append(entry)
            size += one
        updates.append(encode_entries(batch))
        return updates

    def clients(self) -> Iterator[tuple[Entry, int | None]]:
        """Every live state with the connection controlling it."""
        for entry in self.states.entries():
            yield entry, self._owner.get(entry.client)
