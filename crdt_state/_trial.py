"""Updates from peers tried on a second document before the state's own (pycrdt, no I/O).

pycrdt integrates an update struct by struct and stops at the first it cannot place (an
error, or a panic of its Rust core) without taking back what it integrated before: a
refused update from a malicious or broken peer could leave structs in the document that
the state never recorded, that its peers would then receive, and on which pycrdt panicked
at later updates from real peers (found by fuzzing: one client's frames left a room
refusing every other peer's update, or sending a document its peers could not load).

So a state that judges what its peers send (not a follower) applies their updates to a
*trial* document first: a second pycrdt document holding the same content. Only an update
the trial takes, and whose changes pycrdt reports without failing, reaches the state's
document; one it refuses leaves that document untouched, and the trial, which may now hold
part of it, is dropped. The trial is built on the first update (one copy of the document)
and then caught up before each update with what the document gained since (its structs
from the trial's state vector, and the delete set; nothing when the state vectors are
equal, since every change but a peer's update, which the trial took first, advances
it): a state that only merges (a hub room of crdt-state agents) never builds one; one
receiving plain Yjs updates applies each twice.
"""

from __future__ import annotations

import logging
from typing import Any

from pycrdt import Doc, Map

from . import _document as ydoc
from .errors import INTERRUPTS, InvalidUpdate

__all__ = ["TrialDocument"]

log = logging.getLogger("crdt_state.replication")


def _read_events(events: list[Any]) -> None:
    """Read every deep event as the state's own observer does (pycrdt panicked there once).

    A failure here fails the trial's ``apply_update`` (pycrdt raises the callback's error).
    """
    for event in events:
        list(event.path)
        keys = getattr(event, "keys", None)
        if not isinstance(keys, dict):
            getattr(event, "delta", None)


class TrialDocument:
    """The trial document of one state (built on demand, dropped after a refusal)."""

    def __init__(self) -> None:
        self._doc: Doc[Any] | None = None

    def attempt(self, main: Doc[Any], pending: bytes | None, update: bytes) -> None:
        """Apply ``update`` to the trial (caught up with ``main`` first) or refuse it.

        ``pending`` are the structs ``main`` keeps pending (its encoded state leaves them
        out), tried with the update. ``main`` is not modified.

        Raises:
            InvalidUpdate: pycrdt refused or panicked on the update (the trial is dropped).
        """
        trial = self._caught_up(main)
        if trial is None:  # the document itself could not be copied: nothing to try on
            return
        self._doc = None  # until it has taken the update whole
        try:
            if pending is not None:
                trial.apply_update(pending)
            trial.apply_update(update)
        except BaseException as exc:
            if isinstance(exc, INTERRUPTS):
                raise
            raise InvalidUpdate.from_failure(exc, update) from exc
        self._doc = trial

    def state(self) -> bytes | None:
        """The trial's state vector (after the update it last took), ``None`` when none."""
        return None if self._doc is None else bytes(self._doc.get_state())

    def drop(self) -> None:
        """Forget the trial (the state's document was replaced, or the state closed)."""
        self._doc = None

    def _caught_up(self, main: Doc[Any]) -> Doc[Any] | None:
        trial = self._doc
        try:
            if trial is None:
                trial = Doc()
                trial.apply_update(main.get_update())
                trial.get(ydoc.ROOT, type=Map).observe_deep(_read_events)
            else:
                state = trial.get_state()
                if state != main.get_state():  # equal: the same content (deletions
                    trial.apply_update(main.get_update(state))  # of merges come with a tick)
        except BaseException as exc:
            if isinstance(exc, INTERRUPTS):
                raise
            # not the update's fault: pycrdt cannot copy the document as it is
            log.warning("no trial document: pycrdt could not copy the state's (%s)", exc)
            self._doc = None
            return None
        return trial
