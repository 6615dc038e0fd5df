"""The read side of a :class:`~sync.client.remote.RemoteState`: what the agent sees.

:class:`RemoteReads` is the base of ``RemoteState``: the room as this agent sees it,
the hub's confirmed replica plus the agent's own unconfirmed merges (the overlay of
:mod:`sync.client._outbox`), read under the replica's lock so both are taken at one
moment. Not API: the names are ``RemoteState``'s, documented there.
"""

from __future__ import annotations

from typing import Any, Generic

from crdt_state import MISSING, SharedState, VersionVector, parse_path
from crdt_state.model_type import ModelT
from crdt_state.values import tree_get
from sync.client._outbox import Outbox
from sync.client._overlay import view_snapshot
from sync.client.branch import RemoteToken

__all__ = ["RemoteReads"]


class RemoteReads(Generic[ModelT]):
    """Reads of a remote state: its replica with this agent's unconfirmed merges on top."""

    replica: SharedState[ModelT]
    _outbox: Outbox

    @property
    def token(self) -> VersionVector:
        """The hub's confirmed token (this agent's unconfirmed merges are not in it)."""
        return self.replica.token

    def snapshot(self) -> dict[str, Any]:
        """The room as this agent sees it: confirmed state plus its own unconfirmed merges."""
        with self.replica.lock:
            overlay = self._outbox.snapshot()
            snapshot = self.replica.snapshot()
        return view_snapshot(snapshot, overlay.entries)

    def read(self) -> tuple[dict[str, Any], RemoteToken]:
        """``(snapshot, token)`` taken atomically; the snapshot is the one of :meth:`snapshot`.

        The token is the hub's confirmed token (equal to :attr:`token` at that
        moment): the snapshot may also show this agent's unconfirmed merges,
        which the token does not include. The token remembers them, so
        ``acommit(changes, token)`` sends them as the merge's chain and the hub
        judges the changes against the token plus those merges.
        """
        with self.replica.lock:
            overlay = self._outbox.snapshot()
            snapshot, token = self.replica.read()
            seq = self.replica.position
        return view_snapshot(snapshot, overlay.entries), RemoteToken(token, seq, overlay)

    def get(self, path: Any, default: Any = None) -> Any:
        """The value at ``path`` as this agent sees it (a copy), or ``default`` when absent."""
        key = parse_path(path)
        with self.replica.lock:
            overlay = self._outbox.snapshot()
            if key[0] not in overlay.keys:
                return self.replica.get(key, default)
            value = self._outbox.view_of(key[0], self.replica.position, overlay)
        found = MISSING if value is MISSING else tree_get({key[0]: value}, key)
        return default if found is MISSING else found

    def get_update(self, since: VersionVector | None = None) -> bytes:
        """A Yjs update of the confirmed state (see :meth:`SharedState.get_update`)."""
        return self.replica.get_update(since)

    def model(self) -> ModelT:
        """The room as this agent sees it, as an instance of the schema given to :func:`connect`."""
        return self.replica.to_model(self.snapshot())
