"""What a remote agent's unconfirmed merges add to its replica, kept up to date (no I/O).

The outbox (:mod:`sync.client._outbox`) decides how each merge lives and ends; a
:class:`ShownMerges` keeps what reads show of them: the current
:class:`~sync.client._overlay.Overlay` (one entry per live merge, and per applied
merge whose update the replica does not hold yet), and the last view computed for each
top-level key, so that a read after one more merge applies only that merge.

Not locked by itself: its owner calls it under the replica's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from crdt_state import Change, SharedState, VersionVector
from crdt_state.values import copy_value
from sync.client._offline import PendingMerge
from sync.client._overlay import Overlay, OverlayEntry, depends_on, overlay_keys, view_of_key

__all__ = ["ShownMerges", "entry_of"]


def entry_of(merge: PendingMerge) -> OverlayEntry:
    """The overlay entry that shows ``merge``."""
    return OverlayEntry(merge.order, merge.request_id, tuple(merge.ops))


class ShownMerges:
    """The overlay of an agent's unconfirmed merges over its replica, and cached views.

    Args:
        replica: the agent's replica.
        live: the entries of the live merges now (called when the overlay is rebuilt).
    """

    def __init__(self, replica: SharedState, live: Callable[[], Sequence[OverlayEntry]]) -> None:
        self._replica = replica
        self._live = live
        self.overlay = Overlay()
        """The overlay now (a new generation whenever an entry changes or goes)."""
        self._confirmed: list[tuple[VersionVector, OverlayEntry]] = []
        self._forget: list[int] = []  # request ids of confirmed merges the replica now holds
        self._views: dict[str, tuple[int, int, int, Any]] = {}  # see view_of

    def add(self, entry: OverlayEntry) -> None:
        """Show a new live merge (appended when it is the latest, the common case)."""
        overlay = self.overlay
        if not overlay.entries or overlay.entries[-1].order < entry.order:
            self.overlay = Overlay(
                (*overlay.entries, entry), overlay.keys | entry.keys, overlay.generation
            )
        else:
            self.rebuild()

    def confirm(self, token: VersionVector, entry: OverlayEntry) -> None:
        """Keep showing an applied merge until the replica reaches ``token``."""
        self._confirmed.append((token, entry))

    def rebuild(self) -> None:
        """Make the overlay again from the live and confirmed merges (a new generation)."""
        entries = sorted([*self._live(), *(e for _, e in self._confirmed)], key=lambda e: e.order)
        self.overlay = Overlay(tuple(entries), overlay_keys(entries), self.overlay.generation + 1)
        self._views.clear()

    def prune(self) -> None:
        """Stop showing the applied merges the replica now holds."""
        if not self._confirmed:
            return
        token = self._replica.token
        held = [entry for t, entry in self._confirmed if t <= token]
        if held:
            self._forget += [entry.request_id for entry in held]
            self._confirmed = [c for c in self._confirmed if not c[0] <= token]
            self.rebuild()

    def forgotten(self) -> list[int]:
        """The request ids of the applied merges pruned since the last call."""
        forget, self._forget = self._forget, []
        return forget

    def holds_back(self, order: int, ops: Sequence[Change]) -> bool:
        """Tell whether ``ops`` must wait for an applied merge the replica lacks.

        Returns:
            True while an applied merge before ``order`` that ``ops`` depend on is
            not in the replica yet.
        """
        token = self._replica.token
        return any(
            e.order < order and depends_on(e.ops, ops) and not t <= token
            for t, e in self._confirmed
        )

    def view_of(self, key: str, base_seq: int, overlay: Overlay) -> Any:
        """Return top-level ``key`` at replica position ``base_seq`` with ``overlay`` applied.

        The value is a fresh copy; :data:`~crdt_state.MISSING` when absent.

        The last value computed for each key is kept: a later overlay of the same
        generation and base only applies the entries appended since.
        """
        cached = self._views.get(key)
        if (
            cached is not None
            and cached[:2] == (overlay.generation, base_seq)
            and cached[2] <= len(overlay.entries)
        ):
            value, start = cached[3], cached[2]
        else:
            value, start = self._replica.read_at((key,), base_seq), 0
        value = view_of_key(value, key, overlay.entries[start:])
        if overlay.generation == self.overlay.generation:
            self._views[key] = (overlay.generation, base_seq, len(overlay.entries), value)
        return copy_value(value)
