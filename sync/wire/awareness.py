"""Awareness (y-protocols ``awareness.js``): the update format and its clock rules.

An awareness update is ``varuint n`` then, ``n`` times, ``varuint client_id``,
``varuint clock``, ``varstring state_json``. A state of ``null`` means the client is
gone. One update may carry several clients' states: a stock y-websocket client sends
back every change it applies, other peers' states included.

:class:`AwarenessStates` keeps what a y-protocols ``Awareness`` keeps of remote
clients: each client's clock and state, a state taken only when its clock is newer
than the one held, or equal with a ``null`` state while a state is held (the removal a
client or the hub sends at the clock it announced). Clocks of removed clients are kept
(a bounded number, :data:`MAX_GONE`) so that a late echo of a removed state is refused.
States stay JSON text: the hub relays them as they came (:func:`decoded_state` reads one
for the inspector and for a client's ``peers``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Final, NamedTuple

from sync.wire.lib0 import Reader, encode_var_string, encode_var_uint

__all__ = [
    "MAX_GONE",
    "AwarenessStates",
    "Entry",
    "decode_entries",
    "decoded_state",
    "encode_entries",
    "is_null",
]

MAX_GONE: Final = 1_024
"""Clocks of removed clients an :class:`AwarenessStates` keeps (the oldest are dropped)."""

_JSON_SPACE: Final = " \t\n\r"


class Entry(NamedTuple):
    """One record of an awareness update: a client's state (JSON text) at ``clock``."""

    client: int
    clock: int
    state: str

    @property
    def removed(self) -> bool:
        """True for a ``null`` state: the client is gone."""
        return is_null(self.state)


def is_null(state: str) -> bool:
    """True when the JSON text ``state`` is ``null``."""
    return state.strip(_JSON_SPACE) == "null"


def decoded_state(state: str) -> Any:
    """A state's JSON value (``None`` for ``null``), else its text.

    The text when it is not JSON or is nested past the interpreter's stack (states are
    opaque to the hub: never an error).
    """
    try:
        return json.loads(state)
    except (ValueError, RecursionError):
        return state


def decode_entries(payload: bytes) -> list[Entry]:
    """The records of an awareness update, in order; ProtocolError if malformed."""
    reader = Reader(payload)
    entries: list[Entry] = []
    for _ in range(reader.read_var_uint()):
        client = reader.read_var_uint()
        clock = reader.read_var_uint()
        entries.append(Entry(client, clock, reader.read_var_string()))
    reader.expect_end()
    return entries


def encode_entries(entries: Iterable[Entry]) -> bytes:
    """An awareness update carrying ``entries``."""
    parts = [b""]
    count = 0
    for client, clock, state in entries:
        parts += [encode_var_uint(client), encode_var_uint(clock), encode_var_string(state)]
        count += 1
    parts[0] = encode_var_uint(count)
    return b"".join(parts)


class AwarenessStates:
    """Remote clients' awareness states, kept by y-protocols' rules (see the module doc)."""

    def __init__(self, max_gone: int = MAX_GONE) -> None:
        self._states: dict[int, tuple[int, str]] = {}  # client -> (clock, state), live
        self._gone: dict[int, int] = {}  # removed client -> its clock, oldest first
        self._max_gone = max_gone

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, client: object) -> bool:
        return client in self._states

    def __iter__(self) -> Iterator[int]:
        return iter(self._states)

    def get(self, client: int) -> Entry | None:
        """The live state of ``client`` (``None`` if it has none)."""
        held = self._states.get(client)
        return None if held is None else Entry(client, *held)

    def entries(self) -> list[Entry]:
        """Every live state, in the order the clients first announced one."""
        return [Entry(client, clock, state) for client, (clock, state) in self._states.items()]

    def clock(self, client: int) -> int:
        """The clock held for ``client``: 0 for a client never seen."""
        held = self._states.get(client)
        return held[0] if held is not None else self._gone.get(client, 0)

    def plan(self, entries: Iterable[Entry]) -> list[tuple[Entry, bool]]:
        """The entries of an update that apply, in order, without applying them.

        Each comes with whether it changes the visible states (a state set or
        removed); an entry that only records the clock of a client without a state
        (a ``null`` for a client not held) does not. Apply them with :meth:`commit`.
        """
        seen: dict[int, tuple[int, bool]] = {}  # client -> (clock, has a state) so far
        out: list[tuple[Entry, bool]] = []
        for entry in entries:
            known = seen.get(entry.client)
            if known is None:
                known = (self.clock(entry.client), entry.client in self._states)
            clock, live = known
            removed = entry.removed
            if clock < entry.clock or (clock == entry.clock and removed and live):
                out.append((entry, live or not removed))
                seen[entry.client] = (entry.clock, not removed)
        return out

    def commit(self, planned: Iterable[tuple[Entry, bool]]) -> list[Entry]:
        """Apply what :meth:`plan` returned (nothing changed since); returns the visible changes."""
        changed: list[Entry] = []
        for entry, visible in planned:
            self._set(entry)
            if visible:
                changed.append(entry)
        return changed

    def apply(self, entries: Iterable[Entry]) -> list[Entry]:
        """Apply an update's entries by the clock rules; returns the visible changes."""
        return self.commit(self.plan(entries))

    def remove(self, clients: Iterable[int]) -> list[Entry]:
        """Remove the states of ``clients`` (those held) at their clocks; returns the removals."""
        removed: list[Entry] = []
        for client in clients:
            held = self._states.get(client)
            if held is not None:
                entry = Entry(client, held[0], "null")
                self._set(entry)
                removed.append(entry)
        return removed

    def clear(self) -> None:
        """Forget every client, its clock included."""
        self._states.clear()
        self._gone.clear()

    def _set(self, entry: Entry) -> None:
        client = entry.client
        if entry.removed:
            self._states.pop(client, None)
            self._gone.pop(client, None)  # the newest removals are the last dropped
            self._gone[client] = entry.clock
            if len(self._gone) > self._max_gone:
                del self._gone[next(iter(self._gone))]
        else:
            self._gone.pop(client, None)
            self._states[client] = (entry.clock, entry.state)
