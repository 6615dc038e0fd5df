"""One deep observer per state: the root map's events, handed to whoever asks for them.

Integrating a received update (:mod:`crdt_state._replication`) and replaying a stored
log (:mod:`crdt_state._durable`) need the paths each Yjs transaction wrote. Subscribing
a fresh ``observe_deep`` callback per update costs more than the update itself on small
changes: pycrdt reads the callback's signature (``inspect.signature``) on every
subscription and wraps every event, with every value it carries, in Python objects.

:class:`DeepEvents` subscribes once, on the root's integrated type, a callback that
does nothing unless a *sink* is routed (:meth:`DeepEvents.routed`); the sink gets
pycrdt's raw events (``path``, ``keys`` with ``action``/``newValue``, ``delta``), read
lazily by :func:`crdt_state._events.event_changes`, never wrapped; they are valid only
during the call. Local merges write
with no sink routed: their transactions cost a call that returns at once.

The callback holds the router weakly, so a document's subscription never keeps its
state alive (a reference from pycrdt's Rust side is a cycle the garbage collector
cannot see); :meth:`DeepEvents.detach` drops it when the state closes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pycrdt import Map

__all__ = ["DeepEvents", "Sink"]

Sink = Callable[[list[Any]], None]
"""Takes the raw deep events of one Yjs transaction."""


class DeepEvents:
    """Routes the root map's deep events to the current sink; one subscription per document.

    Not thread-safe by itself: used under the state's lock, like every part of the core.
    """

    def __init__(self) -> None:
        self._sink: Sink | None = None
        self._error: BaseException | None = None
        self._subscription: Any = None
        self._root: Map[Any] | None = None
        self.attachments = 0
        """How many times a subscription was made (for tests: once per document)."""

    @property
    def attached(self) -> bool:
        """True while a subscription is installed."""
        return self._subscription is not None

    def attach(self, root: Map[Any]) -> None:
        """Subscribe on ``root`` (an integrated root map); drops an earlier subscription."""
        self.detach()
        ref = weakref.ref(self)

        def on_events(events: list[Any]) -> None:
            router = ref()
            if router is None or router._sink is None:
                return
            try:
                router._sink(events)
            except BaseException as exc:  # raised again once the transaction is over
                if router._error is None:
                    router._error = exc

        self._subscription = root.integrated.observe_deep(on_events)
        self._root = root
        self.attachments += 1

    def detach(self) -> None:
        """Drop the subscription (a closed state, or a document being replaced)."""
        if self._subscription is not None:
            self._subscription.drop()
            self._subscription = None
            self._root = None

    @contextmanager
    def routed(self, root: Map[Any], sink: Sink) -> Iterator[None]:
        """Hand every deep event of ``root`` to ``sink`` for the duration of the block.

        Subscribes on ``root`` first if this router is not subscribed there yet. The
        first exception ``sink`` raised is raised when the block ends (after an
        exception of the block itself, it is dropped). Routes do not nest.

        Raises:
            RuntimeError: a sink is already routed.
        """
        if self._sink is not None:
            raise RuntimeError("deep events are already routed")
        if self._root is not root:
            self.attach(root)
        self._sink = sink
        self._error = None
        try:
            yield
        finally:
            self._sink = None
            error, self._error = self._error, None
        if error is not None:
            raise error
