"""A websocket connection whose handler may take a message straight from the read callback.

The one place the hub relies on ``websockets``' private attributes for reading
(``recv_messages.frames``, its ``get_waiter`` and ``queue``) and, once a connection is
lost, on its protocol's ``parser`` and ``parser_exc``; where they are missing the
connection behaves as a plain ``ServerConnection``. A ``websockets`` upgrade must rerun
``tests/sync/server/test_hub_inline_merges.py`` and ``test_hub_closed_cycles.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import State

__all__ = ["InlineConnection", "inline_connection"]


class InlineConnection(ServerConnection):
    """A connection whose handler may take a message straight from the read callback.

    ``websockets`` queues each message and wakes the handler's task for it (a future,
    a loop callback, the task's coroutines resumed and suspended again). When
    ``message_sink`` is set, the handler's task waits in ``recv`` with nothing queued
    before it, the connection is open and the message is a single binary frame, the
    frame is given to ``message_sink`` first: it returns True when it has handled the
    message (as the handler's loop would have, the message is then not queued) and
    False to leave it to the handler. Messages keep their order: one is taken only when
    no other is waiting for the handler.
    """

    message_sink: Callable[[bytes], bool] | None = None

    def process_event(self, event: Any) -> None:
        sink = self.message_sink
        if sink is not None and type(event) is Frame and event.opcode is Opcode.BINARY:
            frames = getattr(self.recv_messages, "frames", None)
            waiter = getattr(frames, "get_waiter", None)
            if (
                event.fin
                and waiter is not None
                and not waiter.done()
                and not frames.queue  # type: ignore[union-attr]
                and self.protocol.state is State.OPEN
            ):
                data = event.data
                if sink(data if type(data) is bytes else bytes(data)):
                    return
        super().process_event(event)

    def connection_lost(self, exc: Exception | None) -> None:
        """Break the cycles that kept a closed connection's protocol until a full collection.

        ``websockets``' protocol parses with a generator of its own (``protocol.parser``,
        its frame holding the protocol), left suspended for good once the connection is
        closed; and it keeps a parser's error (a message too big, a protocol error) as
        ``protocol.parser_exc``, whose traceback holds the frames of the parser, which
        hold the protocol. Both are cycles: the protocol and its buffers stayed until a
        collection of the oldest generation, which a hub makes rarely (see
        ``sync.server._memory``). Once the connection is lost (the protocol at end of
        stream: nothing steps its parser again), the parser is closed and the error's
        traceback dropped; the error itself stays, the cause of the ``ConnectionClosed``
        the handler gets.
        """
        super().connection_lost(exc)
        protocol = self.protocol
        failed = getattr(protocol, "parser_exc", None)
        if failed is not None:
            failed.__traceback__ = None
        close = getattr(getattr(protocol, "parser", None), "close", None)
        if close is not None:
            close()


def inline_connection(base: type[ServerConnection]) -> type[ServerConnection]:
    """``base`` (the inspector's metered connection) with :class:`InlineConnection`'s sink."""
    return type("HubConnection", (InlineConnection, base), {})
